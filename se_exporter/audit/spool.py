"""A bounded, durable FIFO of audit records waiting for the OTLP collector.

The SDK's exporters give up after a short retry window; transitions and approvals must not. The
poll loop ``append``s records (before it saves the event store), the shipper ``peek``s the oldest,
exports them and ``ack``s them once the collector accepted them. On disk it is a ``Journal``
(``audit/journal.py``); in memory only without a path. The poll loop never waits for the disk (a disk at
its IOPS cap takes seconds per fsync): what it appends, and what the shipper acknowledges, is written by
the shipper's own ``sync``, in order, and a record is shipped only once its write was made (``peek``).

Bounded by records and by bytes (``AuditRecord.memory_size``: what a record costs in memory), in memory
and on disk alike: past either bound the oldest records are dropped, counted and logged; a journal
found larger at start-up is replayed within the same bounds. ``uid``s of pending and recently finished
records are remembered, so a record appended twice (a transition re-emitted after a crash between the
append and the state save) is sent once.

A write that fails (a full disk) loses nothing: memory changes first, and the journal is rewritten
whole, atomically, at the next write or at ``close`` (so records appended while the disk was full
reach the file once space is back). ``write_errors`` counts the failures.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from se_exporter.audit.journal import Journal
from se_exporter.audit.records import AuditRecord

log = logging.getLogger(__name__)
DEFAULT_CAPACITY = 10_000
DEFAULT_MAX_BYTES = 8 << 20  # of memory (AuditRecord.memory_size); the journal on disk takes about as much
COMPACT_AFTER_GARBAGE_BYTES = 1 << 20


class Spool:
    """Thread-safe; in memory only when ``path`` is None."""

    def __init__(self, path: Path | None, capacity: int = DEFAULT_CAPACITY, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        if capacity < 1 or max_bytes < 1:
            raise ValueError("spool bounds must be at least 1")
        self.path = path
        self.capacity = capacity
        self.max_bytes = max_bytes
        self.dropped = 0  # since start-up (a Prometheus counter may reset with the process)
        self._pending: OrderedDict[str, AuditRecord] = OrderedDict()
        self._weights: dict[str, int] = {}  # memory_size of each pending record (computed once)
        self._bytes = 0  # their sum
        self._finished: OrderedDict[str, None] = OrderedDict()  # delivered/dropped uids, oldest first
        self._cond = threading.Condition()
        self._garbage = 0  # journal bytes that no longer describe a pending record
        self._closed = False
        self._woken = False
        self._journal: Journal | None = None
        self._unwritten: list[dict[str, Any]] = []  # journal entries memory reflects, not yet written
        self._fresh: set[str] = set()  # pending records whose "add" is among them: not shipped until written
        self._writing = threading.Lock()  # one journal write at a time (the shipper's sync, close)
        self.observe_write: Callable[[float], None] = lambda _seconds: None  # each write's time, fsync included
        if path is not None:  # replayed first, with nothing written meanwhile: the compaction writes the result
            self._load(Journal(path))

    @property
    def depth(self) -> int:
        with self._cond:
            return len(self._pending)

    @property
    def pending_bytes(self) -> int:
        with self._cond:
            return self._bytes

    @property
    def write_errors(self) -> int:
        return self._journal.write_errors if self._journal is not None else 0

    @property
    def synced(self) -> bool:
        """False while a failed write left the journal behind what is in memory."""
        with self._cond:
            return self._journal is None or not self._journal.unsynced

    def append(self, records: Iterable[AuditRecord]) -> int:
        """Queue records not seen before; returns how many were new. Durable when it returns, unless the
        write failed (then at the next successful write or at ``close``)."""
        with self._cond:
            new = [r for r in records if r.uid not in self._pending and r.uid not in self._finished]
            if not new or self._closed:
                return 0
            for record in new:
                self._add(record)
            if self._journal is not None:
                self._fresh.update(record.uid for record in new)
            self._write({"add": r.to_json()} for r in new)
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
        """Write what memory holds and the journal not yet (on the shipper's thread: never the poll's)."""
        with self._writing:
            with self._cond:
                if self._closed:  # after close: nothing more is written
                    return
                behind = self._journal is not None and self._journal.unsynced  # a failed write: rewrite it all
                if self._journal is None or (not self._unwritten and not behind and not self._compaction_due()):
                    self._fresh.clear()
                    return
                journal, entries, fresh = self._journal, self._unwritten, set(self._fresh)
                self._unwritten = []
                whole = list(self._everything()) if journal.unsynced or self._compaction_due() else None
            began, was_unsynced = time.monotonic(), journal.unsynced
            if whole is not None and journal.compact(whole):  # behind after a failure, or mostly garbage
                self._garbage = 0
                if was_unsynced:
                    log.info("log spool %s written again: %d record(s) pending", self.path, len(whole))
            elif whole is None:
                journal.append(entries, lambda: ())
            self.observe_write(time.monotonic() - began)
            with self._cond:
                self._fresh -= fresh  # written, or tried: a full disk delays durability, never delivery

    def ack(self, uids: Sequence[str]) -> None:
        """The collector accepted these: forget them for good (unknown uids are ignored)."""
        with self._cond:
            done = [uid for uid in uids if uid in self._pending]
            if not done or self._closed:
                return
            self._finish(done)
            self._write([{"ack": done}])

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
        with self._writing, self._cond:
            if self._journal is not None:
                self._journal.close()
            self._closed = True
            self._cond.notify_all()

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
            self._unwritten = [e for e in self._unwritten if "add" not in e or e["add"]["uid"] not in unwritten]
            self._fresh -= unwritten
        self._finish(uids)
        if written := [uid for uid in uids if uid not in unwritten]:
            self._write([{"drop": written}])
        self.dropped += len(uids)

    def _finish(self, uids: Sequence[str]) -> None:
        for uid in uids:
            record = self._pending.pop(uid)
            self._bytes -= self._weights.pop(uid)
            self._garbage += record.approximate_size + 64
            self._finished[uid] = None
        while len(self._finished) > self.capacity:  # enough to catch any re-emission after a crash
            self._finished.popitem(last=False)

    def _compaction_due(self) -> bool:
        return self._garbage > max(COMPACT_AFTER_GARBAGE_BYTES, self._bytes)

    def _compact(self, journal: Journal) -> None:
        was_unsynced = journal.unsynced
        if journal.compact(self._everything()):
            self._garbage = 0
            if was_unsynced:
                log.info("log spool %s written again: %d record(s) pending", self.path, len(self._pending))

    def _write(self, entries: Iterable[dict[str, Any]]) -> None:
        """Queue ``entries`` for the next ``sync`` (memory already reflects them)."""
        if self._journal is not None:
            self._unwritten.extend(entries)

    def _everything(self) -> Iterator[dict[str, Any]]:
        if self._finished:
            yield {"seen": list(self._finished)}
        for record in self._pending.values():
            yield {"add": record.to_json()}

    def _load(self, journal: Journal) -> None:
        for entry in journal.replay():
            try:
                self._replay(entry)
            # OverflowError: a number out of range, such as "timestamp_ns": 1e999
            except (ValueError, KeyError, TypeError, AttributeError, OverflowError) as error:
                log.warning("log spool %s: skipping a damaged entry: %s", self.path, error)
            self._enforce_bounds(quietly=True)  # as it replays: never more than the bounds in memory
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
        self._journal = journal
        self._compact(journal)

    def _replay(self, entry: dict[str, Any]) -> None:
        if "add" in entry:
            record = AuditRecord.from_json(entry["add"])
            if record.uid not in self._finished and record.uid not in self._pending:
                self._add(record)
            return
        for uid in [str(uid) for uid in entry.get("ack") or entry.get("drop") or entry["seen"]]:
            if self._pending.pop(uid, None) is not None:
                self._bytes -= self._weights.pop(uid)
            self._finished[uid] = None
