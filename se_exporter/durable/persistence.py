"""The state file (``--state.file``): each stateful component's rows in the database, written when they changed.

Components follow the ``Stateful`` protocol: ``rows()`` returns their state as rows (table → key → a value
msgspec encodes) and ``state_version`` moves whenever that changed. Each restores itself from its tables'
rows as read (``restore``), decoding them with ``decode_row``; this module never sees a domain type.

Saving never holds up the poll loop: ``flush`` encodes the rows of the components that changed, compares
each with what was last handed over (a digest per row), and hands the writer (``durable/database.py``) only
the rows that differ, and deletions of rows a component no longer has. Rows of a component that is off in
this run (no policy, no actions file, OpenTelemetry off) are never looked at: they wait in the database for
the run that uses them. ``flush`` returns the future of the commit that carries what it handed over, for
what must be on disk before it is acted on (an approval's POST, an action run); ``commit_requested``
gives, to another thread, the future of the next ``flush``. ``save`` commits at once (start, stop).

A restart always comes up, whatever it finds (``durable/opening.py``): what cannot be used is set aside,
logged and counted in ``errors`` (``persistence_errors_total{file="state"}``), and so is each row too large
(over ``MAX_STATE_BYTES`` in all: every component bounds what it saves) or that its component cannot
decode: losing history is better than refusing to monitor. A database of a newer release is refused
(``schema.TooNew``). The file is locked (``state.lock``): a second exporter on it is refused.
"""

from __future__ import annotations

import errno
import functools
import hashlib
import logging
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from pathlib import Path
from typing import Protocol, TypeVar

import msgspec

from se_exporter.durable.database import Database
from se_exporter.durable.lock import StateLock
from se_exporter.durable.opening import check_writable, open_database, open_memory_database
from se_exporter.durable.schema import Rows

# What the sections may weigh: the event store (bounded by the document bounds), the open lifecycles
# and the approval ledger, each bounded by their owners, fit in well under this.
MAX_STATE_BYTES = 16 << 20
# The database: the sections and the log spool (DEFAULT_MAX_BYTES of records in memory, about as much on
# disk), with room for sqlite's pages half full.
MAX_DATABASE_BYTES = 64 << 20
# A disk with no space (or no inodes) left at start is tolerated as it is later: counted, retried.
_DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
SAVE_WAIT_SECONDS = 30.0  # a close outside a stop (a start-up that failed) waits this long for a slow disk
log = logging.getLogger(__name__)
T = TypeVar("T")


Tables = dict[str, dict[str, bytes]]  # table -> key -> the JSON read at start


class Stateful(Protocol):
    @property
    def state_version(self) -> int: ...

    def rows(self) -> Mapping[str, Mapping[str, object]]: ...


def decode_row(body: bytes, schema: type[T]) -> T:
    """A row's JSON as ``schema``; raises ``msgspec.ValidationError`` or ``msgspec.DecodeError`` saying what
    is wrong."""
    return msgspec.json.decode(body, type=schema, strict=True)


class Persistence:
    """Saves the tracked components' rows into the database; keeps nothing without a path.

    Raises ``OSError`` at construction when the file's directory cannot be written (a full disk aside)
    or when another exporter holds the file, and ``schema.TooNew`` for a database of a newer release: a
    state file that cannot be kept is a start-up error, not a surprise at the first transition.
    """

    def __init__(
        self,
        path: Path | None,
        *,
        observe_write: Callable[[str, float], None] = lambda _file, _seconds: None,  # each commit, fsync included
    ) -> None:
        self.path = path
        self.errors = 0  # failed saves, and unusable files at start-up: persistence_errors_total{file="state"}
        self.ok = True  # the last save succeeded (approvals wait while it did not)
        self._failure = ""  # why the last save failed
        self.database: Database
        self._components: dict[str, tuple[Stateful, tuple[str, ...]]] = {}
        self._versions: dict[str, int] = {}  # of each component, when its rows were last handed over
        self._digests: dict[str, dict[str, bytes]] = {}  # table -> key -> digest of the row last handed over
        self._lock = threading.Lock()  # the poll loop and Exporter.close both save
        self._requests: list[Future[None]] = []  # commit_requested: completed with the next flush's commit
        self._file_lock: StateLock | None = None
        self._earlier_rows: Rows | None = None
        self._observe_write = observe_write
        if path is None:  # an in-memory database, for the log spool alone (no component's rows are kept)
            self.database = open_memory_database()
        else:
            self._open(path)

    def restore(
        self,
        name: str,
        tables: tuple[str, ...],
        from_rows: Callable[[Tables], T],
        empty: Callable[[], T],
    ) -> T:
        """The component ``from_rows`` makes of its tables' rows; one it cannot use (it raises ``ValueError``
        or a msgspec error) is logged, counted, and the component starts ``empty()`` (its rows are then
        deleted at the first save: nothing could use them)."""
        found: Tables = {table: self._read(table) for table in tables}
        for table, rows in found.items():
            self._digests[table] = {key: _digest(body) for key, body in rows.items()}
        try:
            return from_rows(found)
        except (ValueError, msgspec.MsgspecError) as problem:
            log.error("state file %s: its %s rows cannot be used (%s): starting without them", self.path, name, problem)
            self.errors += 1
            return empty()

    def track(self, name: str, component: Stateful, tables: tuple[str, ...]) -> None:
        """Save ``component``'s rows into ``tables`` (each table is one component's) from now on."""
        self._components[name] = (component, tables)
        for table in tables:
            self._digests.setdefault(table, {})
        self._versions[name] = -1  # the first flush compares every row with what was read

    def commit_requested(self) -> Future[None]:
        """For another thread than the poll loop's: a future completed when the commit of the next ``flush``
        succeeded (so it carries every change made before this call)."""
        future: Future[None] = Future()
        with self._lock:
            self._requests.append(future)
        return future

    def flush(self, *, force: bool = False) -> Future[None]:
        """Hand the writer the rows that changed (``force``: compare every component's rows), never waiting
        for the disk; returns the future of the commit that carries them (done at once without a file)."""
        with self._lock:
            requests, self._requests = self._requests, []
            changed = [
                name
                for name, (component, _) in self._components.items()
                if force or component.state_version != self._versions[name]
            ]
            rows: Rows = {}
            for name in changed if self.path is not None else ():
                component, tables = self._components[name]
                self._versions[name] = component.state_version  # read first: a change made meanwhile is saved next
                self._diff(component.rows(), tables, rows)
            if not rows and not requests and not self.database.busy:
                return done()  # nothing new, nothing waiting: everything handed over is on disk
        committed = self.database.submit(rows)
        for request in requests:
            committed.add_done_callback(functools.partial(_follow, request=request))
        return committed

    def save(self, timeout: float) -> bool:
        """Commit every change now (after whatever the writer was writing) and wait up to ``timeout`` for it; a
        failure is logged (monitoring goes on) and returns False."""
        committed = self.flush(force=True)
        self.database.sync(timeout)
        return committed.done() and not committed.cancelled()

    def close(self, timeout: float = SAVE_WAIT_SECONDS) -> None:
        """Stop the writer after one last commit (what it was writing is finished first), both within ``timeout``,
        close the file, release the lock; changes the file did not take are said."""
        if not self.database.close(timeout) and self.path is not None:
            why = self._failure if not self.ok else "a write was still in progress: a slow disk"
            log.error(
                "stopping with changes not saved to state file %s (%s): the next start resumes from what it holds "
                "and finds the transitions since again",
                self.path,
                why,
            )
        if self._file_lock is not None:
            self._file_lock.release()
            self._file_lock = None

    def _diff(self, component_rows: Mapping[str, Mapping[str, object]], tables: tuple[str, ...], out: Rows) -> None:
        """Into ``out``: each row of ``tables`` that differs from what was handed over last, and a deletion for
        each row handed over (or read) that the component no longer has."""
        for table in tables:
            digests = self._digests[table]
            now = component_rows.get(table, {})
            changes: dict[str, bytes | None] = {}
            for key, value in now.items():
                body = msgspec.json.encode(value)
                digest = _digest(body)
                if digests.get(key) != digest:
                    changes[key] = body
                    digests[key] = digest
            for key in [key for key in digests if key not in now]:
                del digests[key]
                changes[key] = None
            if changes:
                out[table] = changes

    def _committed(self, rows: bool, spool: bool, seconds: float, failure: Exception | None) -> None:
        """What the writer reports of each commit (on its thread): every transaction is a write of the state
        file, and one that carried the spool's changes a write of the spool too."""
        if self.path is not None:
            self._observe_write("state", seconds)
            if spool:
                self._observe_write("spool", seconds)
        if not rows:  # the spool's alone: the spool counts its own failures
            return
        if failure is not None:
            self._failed(failure)
            return
        if not self.ok:
            log.info("state file %s saved again", self.path)
        self.ok = True

    def _failed(self, error: Exception) -> None:
        self.errors += 1
        self._failure = str(error)
        if self.ok:  # one line per outage
            log.error("could not save state file %s: %s; retried until it works", self.path, error)
        self.ok = False

    def _read(self, table: str) -> dict[str, bytes]:
        if self._earlier_rows is not None:  # an earlier release's file not imported yet (a full disk)
            return {key: body for key, body in self._earlier_rows.get(table, {}).items() if body is not None}
        if self.path is None:
            return {}
        rows, too_large = self.database.rows(table, MAX_STATE_BYTES)
        for key in too_large:
            log.error(
                "state file %s: its %s row %s is larger than this version writes: left out", self.path, table, key
            )
            self.errors += 1
        return rows

    def _open(self, path: Path) -> None:
        try:
            check_writable(path.parent)
        except OSError as exc:
            if exc.errno not in _DISK_FULL:
                raise
            self._failed(exc)  # as later: approvals wait, every change tries again
        try:
            self._file_lock = StateLock.acquire(path)
        except OSError as exc:
            if exc.errno not in _DISK_FULL:  # no inode for the lock file: nothing else can start one either
                raise
            log.warning("cannot create the lock file of %s (%s): running without it", path, exc.strerror)
        try:
            opened = open_database(path, MAX_DATABASE_BYTES, MAX_STATE_BYTES)
        except BaseException:
            if self._file_lock is not None:
                self._file_lock.release()
            raise
        self.errors += opened.unusable
        self.database = opened.database
        self._earlier_rows = opened.earlier_rows
        self.database.on_commit = self._committed


def _digest(body: bytes) -> bytes:
    return hashlib.blake2b(body, digest_size=16).digest()


def done() -> Future[None]:
    """A future already completed: nothing to wait for."""
    future: Future[None] = Future()
    future.set_result(None)
    return future


def _follow(done: Future[None], request: Future[None]) -> None:
    if done.cancelled():
        request.cancel()
    elif request.set_running_or_notify_cancel():
        request.set_result(None)
