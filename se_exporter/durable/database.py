"""The state database's writer (``--state.file``): one thread commits what the components changed and what
the spool changed, the poll loop never waits for the disk (a disk at its IOPS cap takes seconds per fsync).

``submit(rows)`` hands over the rows that changed (table → key → JSON, None to delete) and returns a
``Future`` that completes when a commit carrying them succeeded; nothing else says a write is durable.
Rows handed over while the writer is busy are merged, the newest body of a row winning. A commit that
fails (a full disk, another process holding the write lock) is rolled back and loses nothing: its rows
go back under those handed over since, its futures wait with them, and the writer tries again after
``RETRY_SECONDS``. Each transaction also takes every change of the spool made before it began, so the
rows that say a transition was emitted are never on disk without that transition's record.

WAL, ``synchronous=FULL``: when a commit returns, the WAL is fsynced, so a committed transaction survives a
crash of the process and a power loss alike. Bounded by bytes (``durable/schema.py``): ``max_page_count``,
the WAL truncated to ``WAL_LIMIT_BYTES`` after each checkpoint, a page cache of ``CACHE_KIB``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from se_exporter.durable.schema import COMPONENT_TABLES, Rows, put_rows

RETRY_SECONDS = 1.0  # after a failed commit: a full disk or a held lock is not asked again at once
log = logging.getLogger("se_exporter.durable")


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


class SpoolSource(Protocol):
    """The spool, as the writer sees it: its changes are taken inside each transaction."""

    def take_batch(self) -> SpoolBatch | None: ...

    def batch_written(self, batch: SpoolBatch, failure: Exception | None) -> None: ...


# What a commit reports: whether it carried rows of the components, whether it carried the spool's changes,
# what it took, its failure.
Committed = Callable[[bool, bool, float, Exception | None], None]


class Database:
    """The open database and its writer thread (``durable/opening.py``'s ``open_database`` makes it)."""

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
        self.on_commit: Committed = lambda _rows, _spool, _seconds, _failure: None
        self._connection = connection
        self._reconnect = reconnect
        self._connection_lock = threading.Lock()  # start-up reads on the caller's thread, then the writer's
        self._spool: SpoolSource | None = None
        self._cond = threading.Condition()
        self._rows: Rows = {}  # handed over, not yet being written
        self._futures: list[Future[None]] = []  # completed by the commit that carries ``_rows``
        self._retry_at = 0.0  # monotonic: after a failure, the rows wait until then
        self._requested = 0  # commits asked for (sync)
        self._done = 0  # of them, answered
        self._writing = False
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="se-exporter-state-writer", daemon=True)
        self._thread.start()

    # ----- reading at start-up ---------------------------------------------------------------------

    def rows(self, table: str, max_bytes: int) -> tuple[dict[str, bytes], list[str]]:
        """The rows of ``table`` within ``max_bytes`` in all, and the keys of those left out (too large)."""
        if table not in COMPONENT_TABLES:
            raise ValueError(f"no table {table!r}")
        kept: dict[str, bytes] = {}
        too_large: list[str] = []
        total = 0
        if self._connection is None:
            return kept, too_large
        with self._connection_lock:
            found = self._connection.execute(
                f"SELECT key, length(body), CASE WHEN length(body) <= ? THEN body END FROM {table}",  # noqa: S608
                (max_bytes,),
            )
            for key, size, body in found:
                if body is None or total + size > max_bytes:
                    too_large.append(str(key))
                    continue
                kept[str(key)] = bytes(body)
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

    def attach_spool(self, spool: SpoolSource | None) -> None:
        """The spool whose changes each transaction takes (None: detached, its writes end)."""
        with self._cond:
            self._spool = spool

    def submit(self, rows: Rows) -> Future[None]:
        """Hand over changed rows (merged over those still waiting, the newest body winning); returns at once
        with a future completed when a commit carrying them succeeded (cancelled if the database closes
        first)."""
        future: Future[None] = Future()
        with self._cond:
            if self._closed:
                future.cancel()
                return future
            _merge(self._rows, rows)
            self._futures.append(future)
            self._cond.notify_all()
        return future

    @property
    def busy(self) -> bool:
        """Whether rows wait to be written or are being written (a commit that may yet fail)."""
        with self._cond:
            return bool(self._rows or self._futures) or self._writing

    def sync(self, timeout: float) -> bool:
        """Commit what was handed over and what the spool changed, and wait for it; False if that took
        longer than ``timeout`` (the commit goes on)."""
        with self._cond:
            if self._closed:
                return False
            self._requested += 1
            ticket = self._requested
            self._retry_at = 0.0  # asked for: tried now, even after a failure
            self._cond.notify_all()
            return self._cond.wait_for(lambda: self._done >= ticket or self._closed, timeout) and self._done >= ticket

    def drain(self, timeout: float) -> bool:
        """Wait until nothing waits or is being written; False if that took longer than ``timeout``."""
        with self._cond:
            return self._cond.wait_for(lambda: not (self._rows or self._futures) and not self._writing, timeout)

    def close(self, timeout: float) -> None:
        """Finish what was handed over (bounded by ``timeout``), stop the writer and close the file; futures
        of what could not be written are cancelled."""
        with self._cond:
            self._retry_at = 0.0
            self._cond.notify_all()
        self.drain(timeout)
        with self._cond:
            self._closed = True
            futures, self._futures = self._futures, []
            self._cond.notify_all()
        for future in futures:
            future.cancel()
        self._thread.join(timeout)
        if not self._thread.is_alive() and self._connection is not None:
            with self._connection_lock, contextlib.suppress(sqlite3.Error):
                self._connection.close()

    def _due(self) -> bool:
        if self._requested > self._done:
            return True
        return bool(self._rows or self._futures) and time.monotonic() >= self._retry_at

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._due() and not self._closed:
                    wait = self._retry_at - time.monotonic() if (self._rows or self._futures) else None
                    self._cond.wait(None if wait is None else max(0.01, wait))
                if self._closed:  # close() drained what it could; what is left is cancelled
                    return
                rows, futures, self._rows, self._futures = self._rows, self._futures, {}, []
                requested, spool = self._requested, self._spool
                self._writing = True
            # Taken after the rows: every record appended before they were handed over is in this batch.
            batch = spool.take_batch() if spool is not None else None
            began, failure = time.monotonic(), None
            try:
                self._commit(rows, batch)
            except (sqlite3.Error, OSError) as error:
                failure = error
            took = time.monotonic() - began
            with self._cond:
                self._writing = False
                if failure is not None and (rows or futures):  # carried by the next commit, under what came since
                    newer, self._rows = self._rows, rows
                    _merge(self._rows, newer)
                    self._futures = futures + self._futures
                    self._retry_at = time.monotonic() + RETRY_SECONDS
                self._done = max(self._done, requested)
                self._cond.notify_all()
            if failure is None:
                for future in futures:
                    if future.set_running_or_notify_cancel():
                        future.set_result(None)
            try:  # a bug of a listener must not end the writer: nothing would be saved again
                if spool is not None and batch is not None:
                    spool.batch_written(batch, failure)
                if rows or batch is not None:
                    self.on_commit(bool(rows), batch is not None, took, failure)
            except Exception:
                log.exception("reporting a state file write failed")
            # Let go of what was written before waiting (a 3.5 MB event's row is held no longer than this).
            rows = {}
            futures = []
            batch = None

    def _commit(self, rows: Rows, batch: SpoolBatch | None) -> None:
        if not rows and batch is None:
            self._connect()  # nothing to write, but a future waits: the file must exist
            return
        db = self._connect()
        with self._connection_lock, db:  # one transaction: committed whole, or rolled back
            if batch is not None:
                _write_spool(db, batch, self.finished_limit)
            put_rows(db, rows)

    def _connect(self) -> sqlite3.Connection:
        if self._connection is not None:
            return self._connection
        if self._reconnect is None:
            raise sqlite3.OperationalError("no database")
        self._connection = connection = self._reconnect()
        log.info("state file %s opened", self.path)
        return connection


def _merge(into: Rows, newer: Rows) -> None:
    for table, changes in newer.items():
        into.setdefault(table, {}).update(changes)


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
