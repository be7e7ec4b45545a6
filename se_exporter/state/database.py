"""The durable store (``--state.file``): one sqlite3 database for everything that must survive a restart.

::

    meta(key, value)          the schema's version, and which earlier files were imported
    sections(name, body)      one row per stateful component (event store, lifecycles, approvals, actions):
                              its JSON as the component encodes it, replaced when it changed (alone)
    spool(seq, uid, body)     the OTLP log records waiting for the collector, oldest first (their JSON)
    finished(seq, uid)        the newest uids of records delivered or dropped: a record appended twice
                              (re-emitted after a crash) is sent once

One thread writes: the poll loop never waits for the disk (a disk at its IOPS cap takes seconds per fsync).
Each transaction holds the newest snapshot of the sections handed over and every change of the spool made
before it was taken, so a snapshot that says a transition was emitted is never on disk without that
transition's record: a poll's records and its snapshot commit in one transaction (or the records in an
earlier one, when the shipper asked first), and nothing orders two files. Each snapshot has a generation;
``durable`` is the newest one committed, for what must be remembered before it is acted on (an approval's
POST, an action run: ``wait_durable``, ``on_durable``).

WAL, ``synchronous=FULL``: when a commit returns, the WAL is fsynced, so a committed transaction survives a
crash of the process and a power loss alike. A transaction that fails (a full disk) is rolled back and
loses nothing: its sections are carried by the snapshot waiting after it, if any, every section is handed
over again at the next poll, and the spool's failed batch is written again at its next write.

Bounded by bytes: ``max_page_count`` caps the database at ``max_bytes`` (each component bounds what it
saves, and the spool drops its oldest records past its own bound, well under it), the WAL is truncated to
``WAL_LIMIT_BYTES`` after each checkpoint, and the page cache held in memory is ``CACHE_KIB``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

SCHEMA_VERSION = "1"
SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS sections (name TEXT PRIMARY KEY, body BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS spool (seq INTEGER PRIMARY KEY, uid TEXT NOT NULL UNIQUE, body BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS finished (seq INTEGER PRIMARY KEY, uid TEXT NOT NULL UNIQUE);
"""
WAL_LIMIT_BYTES = 4 << 20
CACHE_KIB = 64  # sqlite's default is 2 MiB: the exporter's memory is bounded, its writes are few and small
BUSY_SECONDS = 5.0  # another process reading the file (an operator's sqlite3 shell) holds a write this long
log = logging.getLogger("se_exporter.state")


@dataclass(slots=True)
class SpoolBatch:
    """The spool's changes since its last batch: the uids of records added, in order (``body(uid)`` is each
    one's JSON, made as it is written; None once it is gone), then uids finished (delivered or dropped):
    ``finished`` those that may be in the table (deleted, and remembered), ``unwritten`` those never
    written (only remembered: the spool keeps the newest of them)."""

    body: Callable[[str], bytes | None]
    added: list[str] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)
    unwritten: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class _Snapshot:
    """What one save hands over: its generation, the sections that changed (name, JSON), every name kept."""

    generation: int
    sections: dict[str, bytes]
    kept: tuple[str, ...]


class SpoolSource(Protocol):
    """The spool, as the writer sees it: its changes are taken inside each transaction."""

    def take_batch(self) -> SpoolBatch | None: ...

    def batch_written(self, batch: SpoolBatch, failure: Exception | None) -> None: ...


# What a commit reports: the generation of its snapshot (None without one), whether it carried the spool's
# changes, what it took, its failure.
Committed = Callable[[int | None, bool, float, Exception | None], None]


class Database:
    """The open database and its writer thread (``state/loading.py``'s ``open_database`` makes it)."""

    def __init__(
        self,
        connection: sqlite3.Connection | None,
        path: Path,
        *,
        reconnect: Callable[[], sqlite3.Connection] | None = None,
        finished_limit: int = 10_000,
    ) -> None:
        """``connection`` None: the file could not be opened at start (a full disk, a directory in its
        place); each commit tries ``reconnect`` first, and fails, counted, until it works."""
        self.path = path
        self.finished_limit = finished_limit
        self.durable = 0  # the generation of the newest snapshot committed
        self.on_commit: Committed = lambda _generation, _spool, _seconds, _failure: None
        self._connection = connection
        self._reconnect = reconnect
        self._connection_lock = threading.Lock()  # start-up reads on the caller's thread, then the writer's
        self._spool: SpoolSource | None = None
        self._cond = threading.Condition()
        self._snapshot: _Snapshot | None = None  # the newest not yet being written
        self._requested = 0  # commits asked for (sync)
        self._done = 0  # of them, answered
        self._writing = False
        self._in_flight: int | None = None  # the generation of the snapshot being written
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="se-exporter-state-writer", daemon=True)
        self._thread.start()

    # ----- reading at start-up ---------------------------------------------------------------------

    def sections(self, max_bytes: int) -> tuple[dict[str, bytes], list[str]]:
        """Every section within ``max_bytes`` in all, and the names of those left out (too large)."""
        kept: dict[str, bytes] = {}
        too_large: list[str] = []
        total = 0
        if self._connection is None:
            return kept, too_large
        with self._connection_lock:
            rows = self._connection.execute(
                "SELECT name, length(body), CASE WHEN length(body) <= ? THEN body END FROM sections", (max_bytes,)
            )
            for name, size, body in rows:
                if body is None or total + size > max_bytes:
                    too_large.append(str(name))
                    continue
                kept[str(name)] = bytes(body)
                total += size
        return kept, too_large

    def spool_rows(self, max_record_bytes: int) -> Iterator[tuple[str, bytes | None]]:
        """The finished uids (body None), then the pending records (uid, JSON), oldest first; a record
        larger than ``max_record_bytes`` (nothing the spool writes) comes with an empty body."""
        connection = self._connection
        if connection is None:
            return
        with self._connection_lock:
            finished = [str(uid) for (uid,) in connection.execute("SELECT uid FROM finished ORDER BY seq")]
        for uid in finished:
            yield uid, None
        last = -1
        while True:  # a page at a time: never the whole table in memory
            with self._connection_lock:
                page = connection.execute(
                    "SELECT seq, uid, CASE WHEN length(body) <= ? THEN body ELSE x'' END FROM spool "
                    "WHERE seq > ? ORDER BY seq LIMIT 256",
                    (max_record_bytes, last),
                ).fetchall()
            if not page:
                return
            for seq, uid, body in page:
                last = seq
                yield str(uid), bytes(body)

    def spool_bodies(self, uids: Sequence[str]) -> dict[str, bytes]:
        """The JSON of the spooled records among ``uids`` (those still in the table)."""
        if not uids or self._connection is None:
            return {}
        with self._connection_lock:
            rows = self._connection.execute(
                "SELECT uid, body FROM spool WHERE uid IN (SELECT value FROM json_each(?))", (json.dumps(list(uids)),)
            ).fetchall()
        return {str(uid): bytes(body) for uid, body in rows}

    # ----- writing ---------------------------------------------------------------------------------

    @property
    def in_flight(self) -> int | None:
        """The generation of the snapshot being written now (None: none is)."""
        return self._in_flight

    def attach_spool(self, spool: SpoolSource | None) -> None:
        """The spool whose changes each transaction takes (None: detached, its writes end)."""
        with self._cond:
            self._spool = spool

    def submit(self, generation: int, sections: dict[str, bytes], kept: Sequence[str]) -> None:
        """Hand over a snapshot: the sections that changed (merged over those of one still waiting, which it
        outdates) and the names of every section to keep (any other is deleted); returns at once."""
        with self._cond:
            waiting = self._snapshot.sections if self._snapshot is not None else {}
            self._snapshot = _Snapshot(generation, waiting | sections, tuple(kept))
            self._cond.notify_all()

    def sync(self, timeout: float) -> bool:
        """Commit what was handed over and what the spool changed, and wait for it; False if that took
        longer than ``timeout`` (the commit goes on)."""
        with self._cond:
            if self._closed:
                return False
            self._requested += 1
            ticket = self._requested
            self._cond.notify_all()
            return self._cond.wait_for(lambda: self._done >= ticket or self._closed, timeout) and self._done >= ticket

    def wait_durable(self, generation: int, timeout: float) -> bool:
        """Whether the snapshot of ``generation`` (or a newer one) is committed within ``timeout`` seconds."""
        with self._cond:
            return self._cond.wait_for(lambda: self.durable >= generation or self._closed, timeout) and (
                self.durable >= generation
            )

    def drain(self, timeout: float) -> bool:
        """Wait until nothing waits or is being written; False if that took longer than ``timeout``."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._due() and not self._writing, timeout)

    def close(self, timeout: float) -> None:
        """Finish what was handed over (bounded by ``timeout``), stop the writer and close the file."""
        self.drain(timeout)
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout)
        if not self._thread.is_alive() and self._connection is not None:
            with self._connection_lock, contextlib.suppress(sqlite3.Error):
                self._connection.close()

    def _due(self) -> bool:
        return self._snapshot is not None or self._requested > self._done

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._due() or self._closed)
                if not self._due():  # closed, and nothing left
                    return
                snapshot, self._snapshot = self._snapshot, None
                requested, spool = self._requested, self._spool
                self._writing = True
                self._in_flight = snapshot.generation if snapshot is not None else None
            # Taken after the snapshot: every record appended before it was handed over is in this batch.
            batch = spool.take_batch() if spool is not None else None
            began, failure = time.monotonic(), None
            try:
                self._commit(snapshot, batch)
            except (sqlite3.Error, OSError) as error:
                failure = error
            took = time.monotonic() - began
            with self._cond:
                self._writing, self._in_flight = False, None
                if failure is None and snapshot is not None:
                    self.durable = max(self.durable, snapshot.generation)
                elif snapshot is not None and self._snapshot is not None:  # the newer one must carry what failed
                    newer = self._snapshot
                    self._snapshot = _Snapshot(newer.generation, snapshot.sections | newer.sections, newer.kept)
                self._done = max(self._done, requested)
                self._cond.notify_all()
            try:  # a bug of a listener must not end the writer: nothing would be saved again
                if spool is not None and batch is not None:
                    spool.batch_written(batch, failure)
                if snapshot is not None or batch is not None:
                    self.on_commit(snapshot.generation if snapshot else None, batch is not None, took, failure)
            except Exception:
                log.exception("reporting a state file write failed")
            # Let go of what was written before waiting: the snapshot's sections (megabytes at 1,000 events)
            # were held through the wait, and the next one was encoded beside them.
            snapshot = batch = None

    def _commit(self, snapshot: _Snapshot | None, batch: SpoolBatch | None) -> None:
        if snapshot is None and batch is None:
            return
        if self._connection is None:
            if self._reconnect is None:
                raise sqlite3.OperationalError("no database")
            self._connection = self._reconnect()
            log.info("state file %s opened", self.path)
        with self._connection_lock, self._connection:  # one transaction: committed whole, or rolled back
            db = self._connection
            if batch is not None:
                _write_spool(db, batch, self.finished_limit)
            if snapshot is not None:  # a section no longer kept (its component gone) is deleted
                _put_sections(db, snapshot.sections.items())
                kept = json.dumps(snapshot.kept)
                db.execute("DELETE FROM sections WHERE name NOT IN (SELECT value FROM json_each(?))", (kept,))


def _write_spool(db: sqlite3.Connection, batch: SpoolBatch, finished_limit: int) -> None:
    # Each record's JSON is made as sqlite takes it: a poll's records are not held twice until they are written.
    rows = ((uid, body) for uid in batch.added if (body := batch.body(uid)) is not None)
    db.executemany("INSERT OR IGNORE INTO spool (uid, body) VALUES (?, ?)", rows)
    if batch.finished:
        db.executemany("DELETE FROM spool WHERE uid = ?", ((uid,) for uid in batch.finished))
    if batch.finished or batch.unwritten:
        remembered = ((uid,) for uid in (*batch.unwritten, *batch.finished))
        db.executemany("INSERT OR IGNORE INTO finished (uid) VALUES (?)", remembered)
        db.execute("DELETE FROM finished WHERE seq <= (SELECT max(seq) FROM finished) - ?", (finished_limit,))


def configure(connection: sqlite3.Connection, max_bytes: int) -> None:
    """WAL, fsynced at every commit, bounded in bytes on disk and in memory; the schema created."""
    connection.execute(f"PRAGMA busy_timeout = {int(BUSY_SECONDS * 1000)}")
    mode = connection.execute("PRAGMA journal_mode = WAL").fetchone()[0]
    if str(mode).lower() != "wal":  # a file system without shared memory for the WAL index: still durable
        log.info("state file: sqlite journal mode %s (WAL unavailable here)", mode)
    connection.execute("PRAGMA synchronous = FULL")
    connection.execute(f"PRAGMA journal_size_limit = {WAL_LIMIT_BYTES}")
    connection.execute(f"PRAGMA cache_size = -{CACHE_KIB}")
    page_size = int(connection.execute("PRAGMA page_size").fetchone()[0])
    connection.execute(f"PRAGMA max_page_count = {max(1, max_bytes // page_size)}")
    create_schema(connection)


def create_schema(connection: sqlite3.Connection) -> None:
    connection.executescript(SCHEMA)
    with connection:
        connection.execute("INSERT OR IGNORE INTO meta (key, value) VALUES ('schema', ?)", (SCHEMA_VERSION,))


def write_sections(connection: sqlite3.Connection, sections: Sequence[tuple[str, bytes]]) -> None:
    """``sections`` written in a transaction of their own (the upgrade's import)."""
    with connection:
        _put_sections(connection, sections)


def _put_sections(db: sqlite3.Connection, sections: Iterable[tuple[str, bytes]]) -> None:
    db.executemany("INSERT OR REPLACE INTO sections (name, body) VALUES (?, ?)", sections)
