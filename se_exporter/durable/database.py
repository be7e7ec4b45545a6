"""The state database's writer (``--state.file``): one thread commits what the components changed and what
the spool changed, the poll loop never waits for the disk (a disk at its IOPS cap takes seconds per fsync).

``submit(rows)`` hands over the rows that changed (table → key → JSON, None to delete) and returns a
``Future`` that completes when a commit carrying them succeeded; nothing else says a write is durable.
Rows handed over while the writer is busy are merged, the newest body of a row winning. A commit that
fails (a full disk, another process holding the write lock) is rolled back and loses nothing: its rows
go back under those handed over since, its futures wait with them, and the writer tries again after
``RETRY_SECONDS`` (``close`` tries once more, and says whether everything was written). Each transaction
also takes every change of the spool made before it began, so the rows that say a transition was emitted
are never on disk without that transition's record.

WAL, ``synchronous=FULL``: when a commit returns, the WAL is fsynced, so a committed transaction survives a
crash of the process and a power loss alike. Bounded by bytes (``durable/schema.py``): ``max_page_count``,
the WAL truncated to ``WAL_LIMIT_BYTES`` after each checkpoint, a page cache of ``CACHE_KIB``.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Protocol, TypeVar

from se_exporter.common.times import time_left
from se_exporter.durable.earlier_release import journal_path
from se_exporter.durable.schema import COMPONENT_TABLES, Rows, put_rows
from se_exporter.durable.spool import DEFAULT_CAPACITY, DEFAULT_MAX_BYTES, Record, Spool, SpoolBatch

R = TypeVar("R", bound=Record)

RETRY_SECONDS = 1.0  # after a failed commit: a full disk or a held lock is not asked again at once
log = logging.getLogger("se_exporter.durable")


class SpoolSource(Protocol):
    """The spool, as the writer sees it (``durable/spool.py``): what it staged goes into the transaction of
    the next ``submit``; each transaction takes its changes, writes them, and says how it went."""

    def has_staged(self) -> bool: ...

    def release(self) -> None: ...

    def take_batch(self) -> SpoolBatch | None: ...

    def write(self, db: sqlite3.Connection, batch: SpoolBatch) -> None: ...

    def batch_written(self, batch: SpoolBatch, failure: Exception | None) -> None: ...

    def opened(self, db: sqlite3.Connection, journal: Path | None) -> None: ...


# What a commit reports: whether it carried rows of the components, whether it carried the spool's changes,
# what it took, its failure.
Committed = Callable[[bool, bool, float, Exception | None], None]


class Database:
    """The open database and its writer thread (``durable/opening.py``'s ``open_database`` makes it)."""

    def __init__(
        self,
        connection: sqlite3.Connection | None,
        path: Path | None,
        *,
        reconnect: Callable[[], sqlite3.Connection] | None = None,
    ) -> None:
        """``path`` None: an in-memory database (no --state.file: the spool's table only). ``connection``
        None: the file could not be opened at start (a full disk, a directory in its place); each commit
        tries ``reconnect`` first, and fails, counted, until it works."""
        self.path = path
        self.on_commit: Committed = lambda _rows, _spool, _seconds, _failure: None
        self._connection = connection
        self._reconnect = reconnect
        self._connection_lock = threading.Lock()  # start-up reads on the caller's thread, then the writer's
        self._spool: SpoolSource | None = None
        self._cond = threading.Condition()
        self._rows: Rows = {}  # handed over, not yet being written
        self._futures: list[Future[None]] = []  # completed by the commit that carries ``_rows``
        self._retry_at = 0.0  # monotonic: after a failure, the rows wait until then
        self._kicked = False  # request_commit
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

    def spool(
        self,
        *,
        encode: Callable[[R], bytes],
        decode: Callable[[bytes], R | None],
        capacity: int = DEFAULT_CAPACITY,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> Spool[R]:
        """The OTLP log spool on this database's ``spool`` table (an earlier release's journal beside the
        file imported into it first), attached to the writer."""
        with self._connection_lock:
            spool: Spool[R] = Spool(
                self.path,
                encode=encode,
                decode=decode,
                reader=self._reader() if self.path is not None else None,
                shared_lock=self._connection_lock,
                capacity=capacity,
                max_bytes=max_bytes,
            )
            if self._connection is not None:
                spool.opened(self._connection, journal_path(self.path) if self.path is not None else None)
        spool.attach(self.request_commit)
        self.attach_spool(spool)
        return spool

    def _reader(self) -> Callable[[], sqlite3.Connection]:
        path = self.path

        def connect() -> sqlite3.Connection:  # the shipper's own: WAL lets it read beside the writer
            return sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)

        return connect

    # ----- writing ---------------------------------------------------------------------------------

    def attach_spool(self, spool: SpoolSource | None) -> None:
        """The spool whose changes each transaction takes (None: detached, its writes end)."""
        with self._cond:
            self._spool = spool

    def submit(self, rows: Rows) -> Future[None]:
        """Hand over changed rows (merged over those still waiting, the newest body winning) and the records
        the spool staged; returns at once with a future completed when a commit carrying them succeeded
        (cancelled if the database closes first)."""
        future: Future[None] = Future()
        with self._cond:
            if self._closed:
                future.cancel()
                return future
            if self._spool is not None:
                self._spool.release()
            _merge(self._rows, rows)
            self._futures.append(future)
            self._cond.notify_all()
        return future

    @property
    def busy(self) -> bool:
        """Whether rows or staged records wait to be written, or are being written (a commit that may yet
        fail)."""
        with self._cond:
            staged = self._spool is not None and self._spool.has_staged()
            return bool(self._rows or self._futures) or self._writing or staged

    def request_commit(self) -> None:
        """Have the writer commit soon what the spool changed (an acknowledgement to delete)."""
        with self._cond:
            self._kicked = True
            self._cond.notify_all()

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

    def close(self, timeout: float) -> bool:
        """One last commit of what was handed over, after the write in flight (a failing disk is tried once more,
        not for all of it), then stop the writer and close the file, all within ``timeout``. Returns whether
        everything handed over was written; the futures of what was not are cancelled."""
        deadline = time.monotonic() + timeout
        self.sync(timeout)
        with self._cond:
            self._closed = True
            futures, self._futures = self._futures, []
            written = not (self._rows or futures or self._writing)
            self._cond.notify_all()
        for future in futures:
            future.cancel()
        self._thread.join(time_left(deadline))
        if not self._thread.is_alive() and self._connection is not None:
            with self._connection_lock, contextlib.suppress(sqlite3.Error):
                self._connection.close()
        return written

    def _due(self) -> bool:
        if self._requested > self._done:
            return True
        return bool(self._rows or self._futures or self._kicked) and time.monotonic() >= self._retry_at

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._due() and not self._closed:
                    waiting = self._rows or self._futures or self._kicked
                    wait = self._retry_at - time.monotonic() if waiting else None
                    self._cond.wait(None if wait is None else max(0.01, wait))
                if self._closed:  # close() drained what it could; what is left is cancelled
                    return
                rows, futures, self._rows, self._futures = self._rows, self._futures, {}, []
                self._kicked = False
                requested, spool = self._requested, self._spool
                self._writing = True
            # Taken after the rows: every record appended before they were handed over is in this batch.
            batch = spool.take_batch() if spool is not None else None
            began, failure = time.monotonic(), None
            try:
                self._commit(rows, spool, batch)
            except (sqlite3.Error, OSError) as error:
                failure = error
            took = time.monotonic() - began
            with self._cond:
                self._writing = False
                if failure is not None and batch is not None:
                    self._kicked = True  # the spool's changes wait in the spool: tried again with the rows
                    self._retry_at = time.monotonic() + RETRY_SECONDS
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

    def _commit(self, rows: Rows, spool: SpoolSource | None, batch: SpoolBatch | None) -> None:
        if not rows and batch is None:
            self._connect()  # nothing to write, but a future waits: the file must exist
            return
        db = self._connect()
        with self._connection_lock, db:  # one transaction: committed whole, or rolled back
            if batch is not None and spool is not None:
                spool.write(db, batch)
            put_rows(db, rows)

    def _connect(self) -> sqlite3.Connection:
        if self._connection is not None:
            return self._connection
        if self._reconnect is None:
            raise sqlite3.OperationalError("no database")
        connection = self._reconnect()
        try:
            if self._spool is not None:  # made without the database: it finds what the table holds now
                self._spool.opened(connection, journal_path(self.path) if self.path is not None else None)
        except BaseException:  # the next write opens it again, and the spool finds it then
            connection.close()
            raise
        self._connection = connection
        log.info("state file %s opened", self.path)
        return connection


def _merge(into: Rows, newer: Rows) -> None:
    for table, changes in newer.items():
        into.setdefault(table, {}).update(changes)
