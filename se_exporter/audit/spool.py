"""A bounded, durable FIFO of audit records waiting for the OTLP collector.

The SDK's exporters give up after a short retry window; transitions and approvals must not. The
poll loop ``append``s records (before it saves the event store), the shipper ``peek``s the oldest,
exports them and ``ack``s them once the collector accepted them. On disk the records are the state
database's ``spool`` table (``durable/database.py``); in memory only without a database. The poll loop never
waits for the disk: the database's writer takes what the spool changed (``take_batch``) in the same
transaction as the state snapshot handed over after it, and a record is shipped only once its write was
tried (``sync``, then ``peek``).

A record is held in memory only until it is written: the spool keeps each pending record's uid and size,
and ``peek`` reads the oldest from the table (a backlog of an outage costs its uids, not its records).
Without a database, and while the disk refuses the writes, the records stay in memory, once: the writer
makes a record's JSON as it writes it (``SpoolBatch.body``).

Bounded by records and by bytes (``AuditRecord.memory_size``: what a record costs in memory), in memory
and on disk alike: past either bound the oldest records are dropped, counted and logged; a table found
larger at start-up is read within the same bounds. ``uid``s of pending and recently finished records are
remembered, so a record appended twice (a transition re-emitted after a crash between the append and the
state save) is sent once.

A write that fails (a full disk) loses nothing: the changes it carried are kept, in order, before the ones
made since, and written at the next write or at ``close`` (so records appended while the disk was full
reach the file once space is back). ``write_errors`` counts the failures. An earlier release's journal
(``<state file>.spool``) is read once, its records written to the database, and the journal kept as
``<state file>.spool.imported``.
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
from se_exporter.durable.database import Database, SpoolBatch
from se_exporter.durable.earlier_release import journal_entries, journal_path

log = logging.getLogger(__name__)
DEFAULT_CAPACITY = 10_000
DEFAULT_MAX_BYTES = 8 << 20  # of memory (AuditRecord.memory_size); the table on disk takes about as much
MAX_RECORD_BYTES = 8 << 20  # a record is bounded by the 4 MiB IMDS body it comes from
# What reading a damaged record or journal entry raises (OverflowError: a number out of range, such as
# "timestamp_ns": 1e999).
_DAMAGED = (ValueError, KeyError, TypeError, AttributeError, OverflowError)
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
        self._pending: OrderedDict[str, int] = OrderedDict()  # uid -> memory_size, oldest first
        self._bytes = 0  # their sum
        self._held: dict[str, AuditRecord] = {}  # pending records not (yet) in the table: all, without one
        self._finished: OrderedDict[str, None] = OrderedDict()  # delivered/dropped uids, oldest first
        self._cond = threading.Condition()
        self._closed = False
        self._woken = False
        self._database = database
        self._batch = SpoolBatch(self._body)  # what memory reflects and the table not yet
        self._fresh: set[str] = set()  # records whose write was not tried yet: not shipped before
        self._unsynced = False  # a write failed: the table is behind memory until one succeeds
        self._journal: Path | None = None  # an earlier release's journal, renamed once its records are written
        if database is not None:  # read first, with nothing written meanwhile
            self._load(database)
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
                self._add(record, record.memory_size)
                self._held[record.uid] = record
                if self._database is not None:
                    self._fresh.add(record.uid)
                    self._batch.added.append(record.uid)
            self._enforce_bounds()
            self._cond.notify_all()
            return len(new)

    def peek(self, limit: int) -> list[AuditRecord]:
        """The oldest pending records whose write was tried (after ``sync``), still pending until
        acknowledged: those written read back from the table."""
        with self._cond:
            uids: list[str] = []
            for uid in self._pending:
                if len(uids) >= limit or uid in self._fresh:
                    break
                uids.append(uid)
            held = {uid: self._held[uid] for uid in uids if uid in self._held}
            database = self._database
        stored = database.spool_bodies([uid for uid in uids if uid not in held]) if database is not None else {}
        records = []
        for uid in uids:
            record = held.get(uid) or _decode(stored.get(uid))
            if record is not None:  # else finished meanwhile
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

    def set_aside(self, uid: str) -> None:
        """Give up on one record the collector will never take (counted as dropped)."""
        with self._cond:
            if uid not in self._pending or self._closed:
                return
            self._finish([uid])
            self.dropped += 1

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
        self.sync()  # what the shipper did not have written yet, and what a full disk refused: the last chance
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._database is not None:
            self._database.attach_spool(None)

    # ----- the database's writer ---------------------------------------------------------------------

    def take_batch(self) -> SpoolBatch | None:
        """What to write in the writer's next transaction (on its thread), or None when nothing changed."""
        with self._cond:
            if not self._changed():
                return None
            batch, self._batch = self._batch, SpoolBatch(self._body)
            return batch

    def batch_written(self, batch: SpoolBatch, failure: Exception | None) -> None:
        """What the transaction that held ``batch`` came to."""
        written = batch.added
        with self._cond:
            self._fresh.difference_update(written)  # tried: a full disk delays durability, never delivery
            if failure is None:
                for uid in written:  # in the table now: read back when shipped
                    self._held.pop(uid, None)
                if self._unsynced:
                    log.info("log spool %s written again: %d record(s) pending", self.path, len(self._pending))
                self._unsynced = False
            else:  # kept, before what changed since, for the next write
                self.write_errors += 1
                if not self._unsynced:  # one line per outage, not one per record
                    log.error(
                        "cannot write log spool %s: %s; records are kept in memory and written once it works again",
                        self.path,
                        failure,
                    )
                self._unsynced = True
                kept = [uid for uid in batch.added if uid in self._held]
                unwritten = [*batch.unwritten, *self._batch.unwritten][-self.capacity :]
                self._batch = SpoolBatch(
                    self._body, [*kept, *self._batch.added], [*batch.finished, *self._batch.finished], unwritten
                )
            journal = self._journal if failure is None else None
            if journal is not None:
                self._journal = None
        if journal is not None:  # its records are in the database now
            with contextlib.suppress(OSError):
                os.replace(journal, journal.with_name(journal.name + ".imported"))

    def _body(self, uid: str) -> bytes | None:
        """The JSON of a record waiting to be written (None: finished meanwhile), on the writer's thread."""
        with self._cond:
            record = self._held.get(uid)
        return _encode(record) if record is not None else None

    # ----- memory --------------------------------------------------------------------------------------

    def _changed(self) -> bool:
        return bool(self._batch.added or self._batch.finished or self._batch.unwritten)

    def _add(self, record: AuditRecord, size: int) -> None:
        self._pending[record.uid] = size
        self._bytes += size

    def _enforce_bounds(self, quietly: bool = False) -> None:
        excess: list[str] = []
        count, size = len(self._pending), self._bytes
        for uid, weight in self._pending.items():
            if count <= self.capacity and size <= self.max_bytes:
                break
            excess.append(uid)
            count, size = count - 1, size - weight
        if excess:
            self._finish(excess)
            self.dropped += len(excess)
        if excess and not quietly:
            log.warning(
                "log spool full (%d records, %d bytes at most): dropped the %d oldest; is the OTLP "
                "collector reachable?",
                self.capacity,
                self.max_bytes,
                len(excess),
            )

    def _finish(self, uids: Sequence[str]) -> None:
        """These pending records are done with (delivered or dropped): never sent again. A record whose add
        waits for the next write is taken out of it (a full disk must not keep what was dropped) and only
        remembered with the next write, the newest ``capacity`` of them (so a long outage of the disk, with
        the collector taking every record, holds a bounded list); every other one is deleted from the table,
        and remembered (those are at most the table's rows)."""
        gone = set(uids)
        unwritten: set[str] = set()
        if self._batch.added and any(uid in self._held for uid in uids):
            unwritten = {uid for uid in self._batch.added if uid in gone}
            self._batch.added = [uid for uid in self._batch.added if uid not in gone]
        self._fresh -= gone
        for uid in uids:
            self._bytes -= self._pending.pop(uid)
            self._held.pop(uid, None)
            self._forget(uid)
        if self._database is not None:
            self._batch.finished.extend(uid for uid in uids if uid not in unwritten)
            self._batch.unwritten.extend(uid for uid in uids if uid in unwritten)
            if len(self._batch.unwritten) > 2 * self.capacity:  # trimmed now and then, not at every record
                del self._batch.unwritten[: -self.capacity]

    def _forget(self, uid: str) -> None:
        self._finished[uid] = None
        while len(self._finished) > self.capacity:  # enough to catch any re-emission after a crash
            self._finished.popitem(last=False)

    def _load(self, database: Database) -> None:
        """The table's records, then an earlier release's journal; what the bounds drop on the way, or what
        is damaged, leaves the table with the first write, and the journal's records go into it."""
        damaged: list[str] = []
        for uid, body in database.spool_rows(MAX_RECORD_BYTES):
            if body is None:
                self._forget(uid)
            elif (record := _decode(body, self.path)) is None:
                damaged.append(uid)
            elif record.uid not in self._finished and record.uid not in self._pending:
                self._add(record, record.memory_size)  # not held: it is in the table
                self._enforce_bounds(quietly=True)  # as it reads: never more than the bounds
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
        self._batch.finished.extend(damaged)
        self._batch.added.extend(self._held)

    def _replay_journal(self, journal: Path, entry: dict[str, Any]) -> None:
        try:
            if "add" in entry:
                record = AuditRecord.from_json(entry["add"])
                if record.uid not in self._finished and record.uid not in self._pending:
                    self._add(record, record.memory_size)
                    self._held[record.uid] = record
                    self._enforce_bounds(quietly=True)
                return
            for uid in _uids(entry.get("ack") or entry.get("drop") or entry["seen"]):
                if uid in self._pending:
                    self._finish([uid])
                else:
                    self._forget(uid)
        except _DAMAGED as error:
            log.warning("log spool %s: skipping a damaged entry: %s", journal, error)


def _encode(record: AuditRecord) -> bytes:
    return json.dumps(record.to_json(), separators=(",", ":"), ensure_ascii=False).encode()


def _decode(body: bytes | None, where: object = None) -> AuditRecord | None:
    """The record a row holds; None (said, when ``where`` names the table) if it is damaged."""
    if body is None:
        return None
    try:
        return AuditRecord.from_json(json.loads(body))
    except _DAMAGED as error:
        if where is not None:
            log.warning("log spool %s: skipping a damaged record: %s", where, error)
        return None


def _uids(values: object) -> Iterator[str]:
    if not isinstance(values, list):
        raise TypeError("not a list of uids")
    return (str(uid) for uid in values)
