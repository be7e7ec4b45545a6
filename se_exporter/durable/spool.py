"""The OTLP log spool: the state database's ``spool`` table is its truth, oldest record first.

The SDK's exporters give up after a short retry window; transitions and approvals must not. The poll loop
``append``s records; they are inserted by the transaction that carries the poll's rows (the database takes
them with the next ``submit``, never before), so a crash can never keep a record without the state that
says it was emitted, nor the reverse, and a record is never emitted twice. The shipper ``peek``s the oldest
committed rows through its own read-only connection (WAL: it never waits behind the writer's fsync), sends
them, and ``ack``s them once the collector took them: they are deleted by the next commit. Until then they
are hidden from ``peek``; a crash before that commit sends them again, with the same uids.

In memory the spool holds only what no commit carried yet (its records' bytes, bounded like the table),
the uids acknowledged and not yet deleted, and counters: no mirror of the table. Without a state file the
table lives in an in-memory database, read under the writer's lock.

Bounded by records (``capacity``) and bytes of JSON (``max_bytes``), in the table and in memory alike: past
either bound the oldest records are dropped, counted and logged; the table's bound is kept by the
transaction that inserts. A commit that fails (a full disk) loses nothing: its records wait, in order, for
the next one; ``write_errors`` counts the failures. Records are only shipped once committed, so a disk that
refuses writes delays delivery (say so: ``synced``).
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, Protocol, TypeVar

from se_exporter.durable.earlier_release import import_journal
from se_exporter.durable.schema import BUSY_SECONDS, CACHE_KIB

log = logging.getLogger(__name__)
DEFAULT_CAPACITY = 10_000
DEFAULT_MAX_BYTES = 8 << 20  # of JSON, in the table and (not yet written) in memory
MAX_RECORD_BYTES = 8 << 20  # a record is bounded by the 4 MiB IMDS body it comes from


class Record(Protocol):
    @property
    def uid(self) -> str: ...


R = TypeVar("R", bound=Record)


@dataclass(slots=True)
class SpoolBatch:
    """What one transaction writes: records to insert (uid, JSON), in order, and uids to delete."""

    inserts: list[tuple[str, bytes]] = field(default_factory=list)
    deletes: list[str] = field(default_factory=list)
    # Filled in by ``write``, inside the transaction:
    inserted: int = 0
    inserted_bytes: int = 0
    deleted: int = 0
    deleted_bytes: int = 0
    dropped: list[str] = field(default_factory=list)


class Spool(Generic[R]):
    """Thread-safe. ``encode``/``decode`` turn a record into its JSON and back (``decode`` returns None for
    a row it cannot read)."""

    def __init__(
        self,
        path: Path | None,
        *,
        encode: Callable[[R], bytes],
        decode: Callable[[bytes], R | None],
        reader: Callable[[], sqlite3.Connection] | None = None,
        shared_lock: threading.Lock | None = None,
        capacity: int = DEFAULT_CAPACITY,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        """``reader`` opens the shipper's read-only connection (None: read the database's own connection
        under ``shared_lock``, an in-memory database); ``opened`` gives it the database once there is one."""
        if capacity < 1 or max_bytes < 1:
            raise ValueError("spool bounds must be at least 1")
        self.path = path
        self.capacity = capacity
        self.max_bytes = max_bytes
        self.dropped = 0  # since start-up (a Prometheus counter may reset with the process)
        self.write_errors = 0
        self._encode, self._decode = encode, decode
        self._cond = threading.Condition()
        self._staged: dict[str, bytes] = {}  # appended, not committed yet, oldest first
        self._staged_bytes = 0
        self._released = 0  # the oldest staged records a submit took: the next transaction inserts them
        self._writing: set[str] = set()  # inserted by the transaction in flight
        self._hidden: set[str] = set()  # acknowledged or dropped, not yet deleted: never peeked again
        self._deletes: list[str] = []  # of them, waiting for the next transaction
        self._rows = 0  # in the table (committed)
        self._row_bytes = 0
        self._unsynced = False  # the last transaction failed: records wait in memory
        self._closed = self._woken = False
        self._reader_factory = reader
        self._reader: sqlite3.Connection | None = None
        self._shared: sqlite3.Connection | None = None
        self._shared_lock = shared_lock or threading.Lock()
        self._request_commit: Callable[[], None] = lambda: None
        self._full = False  # the bounds dropped records since the last commit that dropped none

    def opened(self, db: sqlite3.Connection, journal: Path | None) -> None:
        """The database is open (at start, or at the first write that could open it): an earlier release's
        ``journal`` beside it is imported into the table first, then the table's records are counted."""
        if journal is not None:
            import_journal(journal, db, self.capacity, self.max_bytes)
        rows, size = db.execute("SELECT count(*), coalesce(sum(length(body)), 0) FROM spool").fetchone()
        with self._cond:
            self._rows, self._row_bytes = rows, size
            if self._reader_factory is None:
                self._shared = db
            self._cond.notify_all()
        if rows:
            log.info("log spool %s: %d record(s) still to send", self.path, rows)

    # ----- the poll loop's side ------------------------------------------------------------------

    def append(self, records: Iterable[R]) -> int:
        """Stage records for the transaction of the next submit; returns how many were new."""
        added = 0
        with self._cond:
            if self._closed:
                return 0
            for record in records:
                if record.uid in self._staged:
                    continue
                body = self._encode(record)
                if len(body) > MAX_RECORD_BYTES:
                    log.error(
                        "log record %s is larger than any record can be (%d bytes): dropped", record.uid, len(body)
                    )
                    self.dropped += 1
                    continue
                self._staged[record.uid] = body
                self._staged_bytes += len(body)
                added += 1
            self._bound_staged()
        return added

    def has_staged(self) -> bool:
        with self._cond:
            return len(self._staged) > self._released

    def release(self) -> None:
        """Called by the database with a submit: what is staged goes into the next transaction."""
        with self._cond:
            self._released = len(self._staged)

    # ----- the writer's side ---------------------------------------------------------------------

    def attach(self, request_commit: Callable[[], None]) -> None:
        """How the spool asks the writer for a commit (an acknowledgement to delete)."""
        self._request_commit = request_commit

    def take_batch(self) -> SpoolBatch | None:
        """What the writer's next transaction writes (on its thread), or None when nothing waits."""
        with self._cond:
            inserts = [item for _, item in zip(range(self._released), self._staged.items(), strict=False)]
            deletes, self._deletes = self._deletes, []
            if not inserts and not deletes:
                return None
            self._writing = {uid for uid, _ in inserts}
            return SpoolBatch(inserts, deletes)

    def write(self, db: sqlite3.Connection, batch: SpoolBatch) -> None:
        """Inside the writer's transaction: insert, delete, and keep the table within its bounds (the
        oldest rows dropped)."""
        for uid, body in batch.inserts:
            if db.execute("INSERT OR IGNORE INTO spool (uid, body) VALUES (?, ?)", (uid, body)).rowcount:
                batch.inserted += 1
                batch.inserted_bytes += len(body)
        for uid in batch.deletes:
            found = db.execute("DELETE FROM spool WHERE uid = ? RETURNING length(body)", (uid,)).fetchone()
            if found is not None:
                batch.deleted += 1
                batch.deleted_bytes += int(found[0])
        with self._cond:
            rows = self._rows + batch.inserted - batch.deleted
            size = self._row_bytes + batch.inserted_bytes - batch.deleted_bytes
        if rows <= self.capacity and size <= self.max_bytes:
            return
        last = None
        for seq, uid, length in db.execute("SELECT seq, uid, length(body) FROM spool ORDER BY seq"):
            if rows <= self.capacity and size <= self.max_bytes:
                break
            batch.dropped.append(str(uid))
            rows, size, last = rows - 1, size - int(length), seq
            batch.deleted += 1
            batch.deleted_bytes += int(length)
        if last is not None:
            db.execute("DELETE FROM spool WHERE seq <= ?", (last,))

    def batch_written(self, batch: SpoolBatch, failure: Exception | None) -> None:
        """What the transaction that held ``batch`` came to (on the writer's thread)."""
        with self._cond:
            self._writing = set()
            if failure is not None:
                self._deletes = batch.deletes + self._deletes  # its records stay staged and released
                self.write_errors += 1
                if not self._unsynced:  # one line per outage, not one per record
                    log.error(
                        "cannot write log spool %s: %s; records wait in memory until it works again", self.path, failure
                    )
                self._unsynced = True
                return
            for uid, body in batch.inserts:
                if self._staged.pop(uid, None) is not None:
                    self._staged_bytes -= len(body)
                    self._released -= 1
            self._released = max(0, self._released)
            self._rows += batch.inserted - batch.deleted
            self._row_bytes += batch.inserted_bytes - batch.deleted_bytes
            self._hidden.difference_update(batch.deletes)
            fresh_drops = [uid for uid in batch.dropped if uid not in self._hidden]
            self._hidden.difference_update(batch.dropped)
            self.dropped += len(fresh_drops)
            if not fresh_drops and not batch.dropped and len(self._staged) <= self.capacity:
                self._full = False
            if self._unsynced:
                log.info("log spool %s written again", self.path)
            self._unsynced = False
            self._cond.notify_all()
        if fresh_drops:
            self._said_full(len(fresh_drops))

    # ----- the shipper's side --------------------------------------------------------------------

    def peek(self, limit: int, max_bytes: int = MAX_RECORD_BYTES) -> list[R]:
        """The oldest committed records not acknowledged yet: at most ``limit``, and no more JSON than
        ``max_bytes`` past the first."""
        with self._cond:
            hidden = set(self._hidden)
        records: list[R] = []
        damaged: list[str] = []
        for uid, body in self._read(limit, max_bytes, hidden):
            record = self._decode(body)
            if record is None:
                damaged.append(uid)
                continue
            records.append(record)
        for uid in damaged:
            log.warning("log spool %s: skipping a damaged record %s", self.path, uid)
            self.set_aside(uid)
        return records

    def ack(self, uids: Sequence[str]) -> None:
        """The collector accepted these: deleted by the next commit (asked for now), never peeked again."""
        with self._cond:
            fresh = [uid for uid in uids if uid not in self._hidden]
            if not fresh or self._closed:
                return
            self._hidden.update(fresh)
            self._deletes.extend(fresh)
        self._request_commit()

    def set_aside(self, uid: str) -> None:
        """Give up on one record the collector will never take (counted as dropped)."""
        with self._cond:
            if uid in self._hidden or self._closed:
                return
            self.dropped += 1
        self.ack([uid])

    def count_dropped(self, count: int) -> None:
        """Records the collector took but rejected (a partial success): gone, but counted as dropped."""
        with self._cond:
            self.dropped += count

    @property
    def depth(self) -> int:
        """Records waiting: committed and not acknowledged, and staged."""
        with self._cond:
            return max(0, self._rows - len(self._hidden)) + len(self._staged)

    @property
    def synced(self) -> bool:
        """False while a failed write left records in memory only."""
        with self._cond:
            return not self._unsynced

    def wait(self, timeout: float | None = None) -> bool:
        """Block until a committed record waits (True), after ``wake`` or ``close``, or ``timeout``."""
        with self._cond:
            self._cond.wait_for(lambda: self._shippable() or self._closed or self._woken, timeout)
            return self._shippable() and not self._closed

    def wake(self) -> None:
        """Release ``wait``ers now and from now on (the shipper is stopping: it must not sleep again)."""
        with self._cond:
            self._woken = True
            self._cond.notify_all()

    def close(self) -> None:
        """Stop (later appends and acks are ignored); what is committed stays in the table."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._reader is not None:
            with contextlib.suppress(sqlite3.Error):
                self._reader.close()
            self._reader = None

    def _shippable(self) -> bool:
        return self._rows > len(self._hidden)

    def _read(self, limit: int, max_bytes: int, hidden: set[str]) -> list[tuple[str, bytes]]:
        """The oldest rows not ``hidden``: at most ``limit``, no more bytes than ``max_bytes`` past the first.
        They are chosen by their sizes (sqlite reads a length without the body), so only the bodies taken
        are read into memory."""
        try:
            if self._shared is not None:
                with self._shared_lock:
                    return self._select(self._shared, limit, max_bytes, hidden)
            if self._reader is None:
                if self._reader_factory is None:
                    return []
                self._reader = self._reader_factory()
                self._reader.execute(f"PRAGMA busy_timeout = {int(BUSY_SECONDS * 1000)}")
                self._reader.execute(f"PRAGMA cache_size = -{CACHE_KIB}")
            return self._select(self._reader, limit, max_bytes, hidden)
        except sqlite3.Error as error:  # not made yet (a full disk at start), or unreadable for now
            log.debug("log spool %s: cannot read it yet: %s", self.path, error)
            if self._reader is not None:  # opened on what was there before the database: open it again
                with contextlib.suppress(sqlite3.Error):
                    self._reader.close()
                self._reader = None
            return []

    @staticmethod
    def _select(db: sqlite3.Connection, limit: int, max_bytes: int, hidden: set[str]) -> list[tuple[str, bytes]]:
        chosen: list[int] = []
        size = 0
        for seq, uid, length in db.execute("SELECT seq, uid, length(body) FROM spool ORDER BY seq"):
            if uid in hidden:
                continue
            if chosen and (size + length > max_bytes or len(chosen) >= limit):
                break
            chosen.append(seq)
            size += length
        found = []
        for seq in chosen:  # a row deleted meanwhile (acknowledged) is simply not there
            for uid, body in db.execute("SELECT uid, body FROM spool WHERE seq = ?", (seq,)):
                found.append((str(uid), bytes(body)))
        return found

    def _bound_staged(self) -> None:
        """The records no commit carried yet, within the bounds: the oldest that no transaction is writing
        are dropped."""
        dropped = 0
        for index, uid in enumerate(list(self._staged)):
            if len(self._staged) <= self.capacity and self._staged_bytes <= self.max_bytes:
                break
            if uid in self._writing:
                continue
            self._staged_bytes -= len(self._staged.pop(uid))
            if index - dropped < self._released:
                self._released -= 1
            dropped += 1
        if dropped:
            self.dropped += dropped
            self._said_full(dropped)

    def _said_full(self, count: int) -> None:
        """Said once until a commit drops nothing (a long outage of the collector is one line, not one per
        poll)."""
        level = logging.DEBUG if self._full else logging.WARNING
        self._full = True
        log.log(
            level,
            "log spool full (%d records, %d bytes at most): dropped the %d oldest; is the OTLP collector reachable?",
            self.capacity,
            self.max_bytes,
            count,
        )
