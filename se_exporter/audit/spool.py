"""A bounded, durable FIFO of audit records waiting for the OTLP collector.

The SDK's exporters give up after a short retry window; transitions and approvals must not. The
poll loop ``append``s records (before it saves the event store), the shipper ``peek``s the oldest,
exports them and ``ack``s them once the collector accepted them. On disk the records are the state
database's ``spool`` table (``state/database.py``); in memory only without a database. The poll loop never
waits for the disk: the database's writer takes what the spool changed (``take_batch``) in the same
transaction as the state snapshot handed over after it, and a record is shipped only once its write was
made (``sync``, then ``peek``).

Bounded by records and by bytes (``AuditRecord.memory_size``: what a record costs in memory), in memory
and on disk alike: past either bound the oldest records are dropped, counted and logged; a table found
larger at start-up is read within the same bounds. ``uid``s of pending and recently finished records are
remembered, so a record appended twice (a transition re-emitted after a crash between the append and the
state save) is sent once.

A write that fails (a full disk) loses nothing: memory changes first, and the table is rewritten whole
at the next write or at ``close`` (so records appended while the disk was full reach the file once space
is back). ``write_errors`` counts the failures. An earlier release's journal (``<state file>.spool``) is
read once, its records written to the database, and the journal kept as ``<state file>.spool.imported``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from se_exporter.audit.records import AuditRecord
from se_exporter.state.database import Database, SpoolBatch
from se_exporter.state.earlier import journal_entries, journal_path

log = logging.getLogger(__name__)
DEFAULT_CAPACITY = 10_000
DEFAULT_MAX_BYTES = 8 << 20  # of memory (AuditRecord.memory_size); the table on disk takes about as much
MAX_RECORD_BYTES = 8 << 20  # a record is bounded by the 4 MiB IMDS body it comes from
SYNC_WAIT_SECONDS = 60.0  # the shipper waits this long for a write (a disk at its IOPS cap), then goes on


class Spool:
    """Thread-safe; in memory only when ``database`` is None."""

    def __init__(
        self, database: Database | None, capacity: int = DEFAULT_CAPACITY, max_bytes: int = DEFAULT_MAX_BYTES
    ) -> None:
        if capacity < 1 or max_bytes < 1:
            raise ValueError("spool bounds must be at least 1")
        self.path = database.path if database is not None else None
        self.capacity = capacity
        self.max_bytes = max_bytes
        self.dropped = 0  # since start-up (a Prometheus counter may reset with the process)
        self.write_errors = 0
        self._pending: OrderedDict[str, AuditRecord] = OrderedDict()
        self._weights: dict[str, int] = {}  # memory_size of each pending record (computed once)
        self._bytes = 0  # their sum
        self._finished: OrderedDict[str, None] = OrderedDict()  # delivered/dropped uids, oldest first
        self._cond = threading.Condition()
        self._closed = False
        self._woken = False
        self._database: Database | None = None  # set once read: what reading drops is not a change to write
        self._batch = SpoolBatch()  # what memory reflects and the database not yet
        self._fresh: set[str] = set()  # pending records whose add is in a batch not yet written
        self._unsynced = False  # a write failed (or the table differs from memory): rewrite it whole
        self._journal: Path | None = None  # an earlier release's journal, renamed once its records are written
        if database is not None:  # read first, with nothing written meanwhile
            self._load(database)
            self._database = database
            database.attach_spool(self)

    @property
    def depth(self) -> int:
        with self._cond:
            return len(self._pending)

    @property
    def pending_bytes(self) -> int:
        with self._cond:
            return self._bytes

    @property
    def synced(self) -> bool:
        """False while a failed write left the table behind what is in memory."""
        with self._cond:
            return self._database is None or not self._unsynced

    def append(self, records: Iterable[AuditRecord]) -> int:
        """Queue records not seen before; returns how many were new. Written by the database's writer with
        the next snapshot of the state, or at the shipper's next ``sync``."""
        with self._cond:
            new = [r for r in records if r.uid not in self._pending and r.uid not in self._finished]
            if not new or self._closed:
                return 0
            for record in new:
                self._add(record)
                if self._database is not None:
                    self._fresh.add(record.uid)
                    self._batch.added.append((record.uid, _encode(record)))
            self._enforce_bounds()
            self._cond.notify_all()
            return len(new)

    def peek(self, limit: int) -> list[AuditRecord]:
        """The oldest pending records whose write was made (after ``sync``), still pending until acknowledged."""
        with self._cond:
            records: list[AuditRecord] = []
            for uid, record in self._pending.items():
                if len(records) >= limit or uid in self._fresh:
                    break
                records.append(record)
            return records

    def sync(self) -> None:
        """Have the database write what memory holds and the table not yet, and wait for it (on the shipper's
        thread: never the poll's)."""
        with self._cond:
            if self._database is None or self._closed or not (self._changed() or self._fresh):
                return
            database = self._database
        database.sync(SYNC_WAIT_SECONDS)

    def ack(self, uids: Sequence[str]) -> None:
        """The collector accepted these: forget them for good (unknown uids are ignored)."""
        with self._cond:
            done = [uid for uid in uids if uid in self._pending]
            if not done or self._closed:
                return
            self._finish(done)
            if self._database is not None:
                self._batch.finished.extend(done)

    def set_aside(self, uid: str) -> None:
        """Give up on one record the collector will never take (counted as dropped)."""
        with self._cond:
            if uid not in self._pending or self._closed:
                return
            self._drop([uid])

    def count_dropped(self, count: int) -> None:
        """Records the collector took but rejected (a partial success): gone, but counted as dropped."""
        with self._cond:
            self.dropped += count

    def wait(self, timeout: float | None = None) -> bool:
        """Block until something is pending (True), after ``wake`` or ``close``, or when ``timeout`` passes."""
        with self._cond:
            self._cond.wait_for(lambda: bool(self._pending) or self._closed or self._woken, timeout)
            return bool(self._pending) and not self._closed

    def wake(self) -> None:
        """Release ``wait``ers now and from now on (the shipper is stopping: it must not sleep again)."""
        with self._cond:
            self._woken = True
            self._cond.notify_all()

    def close(self) -> None:
        """Stop writing (later appends and acks are ignored); pending records stay on disk."""
        self.sync()  # what the shipper did not write yet, and what a full disk refused before: the last chance
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._database is not None:
            self._database.attach_spool(None)

    # ----- the database's writer ---------------------------------------------------------------------

    def take_batch(self) -> SpoolBatch | None:
        """What to write in the writer's next transaction (on its thread), or None when nothing changed."""
        with self._cond:
            if self._unsynced:
                batch = SpoolBatch(
                    [(uid, _encode(record)) for uid, record in self._pending.items()], list(self._finished), whole=True
                )
            elif self._changed():
                batch = self._batch
            else:
                return None
            self._batch = SpoolBatch()
            return batch

    def batch_written(self, batch: SpoolBatch, failure: Exception | None) -> None:
        """What the transaction that held ``batch`` came to."""
        with self._cond:
            self._fresh.difference_update(uid for uid, _ in batch.added)  # a full disk delays durability only
            if failure is not None:
                self.write_errors += 1
                if not self._unsynced:  # one line per outage, not one per record
                    log.error(
                        "cannot write log spool %s: %s; records are kept in memory and written once it works again",
                        self.path,
                        failure,
                    )
                self._unsynced = True
            elif batch.whole:
                if self._unsynced and self.write_errors:
                    log.info("log spool %s written again: %d record(s) pending", self.path, len(batch.added))
                self._unsynced = False
            journal = self._journal if failure is None else None
            self._journal = None if journal is not None else self._journal
        if journal is not None:  # its records are in the database now
            with contextlib.suppress(OSError):
                os.replace(journal, journal.with_name(journal.name + ".imported"))

    # ----- memory --------------------------------------------------------------------------------------

    def _changed(self) -> bool:
        return self._unsynced or bool(self._batch.added or self._batch.finished)

    def _add(self, record: AuditRecord) -> None:
        self._pending[record.uid] = record
        self._weights[record.uid] = size = record.memory_size
        self._bytes += size

    def _enforce_bounds(self, quietly: bool = False) -> None:
        excess: list[str] = []
        count, size = len(self._pending), self._bytes
        for uid in self._pending:
            if count <= self.capacity and size <= self.max_bytes:
                break
            excess.append(uid)
            count, size = count - 1, size - self._weights[uid]
        if excess:
            self._drop(excess)
        if excess and not quietly:
            log.warning(
                "log spool full (%d records, %d bytes at most): dropped the %d oldest; is the OTLP "
                "collector reachable?",
                self.capacity,
                self.max_bytes,
                len(excess),
            )

    def _drop(self, uids: Sequence[str]) -> None:
        """Give up on these pending records: never sent, counted (and never written, if they were not yet)."""
        unwritten = self._fresh.intersection(uids)
        if unwritten:
            self._batch.added = [(uid, body) for uid, body in self._batch.added if uid not in unwritten]
            self._fresh -= unwritten
        self._finish(uids)
        if self._database is not None:
            self._batch.finished.extend(uids)
        self.dropped += len(uids)

    def _finish(self, uids: Sequence[str]) -> None:
        for uid in uids:
            self._pending.pop(uid)
            self._bytes -= self._weights.pop(uid)
            self._finished[uid] = None
        while len(self._finished) > self.capacity:  # enough to catch any re-emission after a crash
            self._finished.popitem(last=False)

    def _load(self, database: Database) -> None:
        damaged = 0
        for uid, body in database.spool_rows(MAX_RECORD_BYTES):
            damaged += not self._replay(uid, body)
        journal = journal_path(database.path)
        for entry in journal_entries(journal) if journal.exists() else ():
            self._replay_journal(journal, entry)
            self._journal = journal
        if self.dropped:
            log.warning(
                "log spool %s holds more than the bounds (%d records, %d bytes): dropped the %d oldest",
                self.path,
                self.capacity,
                self.max_bytes,
                self.dropped,
            )
        if self._pending:
            log.info("log spool %s: %d record(s) still to send", self.path, len(self._pending))
        # What was dropped or imported: the table is rewritten as memory holds it, at the first write.
        self._unsynced = bool(self.dropped or damaged or self._journal)

    def _replay(self, uid: str, body: bytes | None) -> bool:
        """One row of the table: a finished uid (no body), or a pending record; False if it was damaged."""
        if body is None:
            self._forget(uid)
            return True
        try:
            record = AuditRecord.from_json(json.loads(body))
        # OverflowError: a number out of range, such as "timestamp_ns": 1e999
        except (ValueError, KeyError, TypeError, AttributeError, OverflowError) as error:
            log.warning("log spool %s: skipping a damaged record %s: %s", self.path, uid, error)
            return False
        self._replay_record(record)
        return True

    def _replay_journal(self, journal: Path, entry: dict[str, Any]) -> None:
        try:
            if "add" in entry:
                self._replay_record(AuditRecord.from_json(entry["add"]))
                return
            for uid in _uids(entry.get("ack") or entry.get("drop") or entry["seen"]):
                self._forget(uid)
        except (ValueError, KeyError, TypeError, AttributeError, OverflowError) as error:
            log.warning("log spool %s: skipping a damaged entry: %s", journal, error)

    def _replay_record(self, record: AuditRecord) -> None:
        if record.uid not in self._finished and record.uid not in self._pending:
            self._add(record)
            self._enforce_bounds(quietly=True)  # as it reads: never more than the bounds in memory

    def _forget(self, uid: str) -> None:
        if self._pending.pop(uid, None) is not None:
            self._bytes -= self._weights.pop(uid)
        self._finished[uid] = None
        while len(self._finished) > self.capacity:
            self._finished.popitem(last=False)


def _encode(record: AuditRecord) -> bytes:
    return json.dumps(record.to_json(), separators=(",", ":"), ensure_ascii=False).encode()


def _uids(values: object) -> Iterator[str]:
    if not isinstance(values, list):
        raise TypeError("not a list of uids")
    return (str(uid) for uid in values)
