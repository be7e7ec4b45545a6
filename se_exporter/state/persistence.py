"""The state file (``--state.file``): one section per stateful component, in the database, saved when one
changed.

Components follow the ``Stateful`` protocol: ``to_state()`` returns what to save (msgspec encodes it)
and ``state_version`` moves whenever that changed. Each restores itself with its own
``from_state(section)``, decoding its raw section with ``decode_section`` (``Persistence.restore``
calls it); this module never sees a domain type.

Saving never holds up the poll loop: ``flush`` hands the sections that changed, encoded, to the database's
writer thread (``state/database.py``) and returns; generations say what is committed (``durable``, ``wait_durable``,
``on_durable``), for what must be remembered before it is acted on. ``save`` commits at once (start, stop).

A restart always comes up, whatever it finds (``state/loading.py``): what cannot be used is set aside,
logged and counted in ``errors`` (``persistence_errors_total{file="state"}``), and so is each section too
large (over ``MAX_STATE_BYTES`` in all: every component bounds what it saves, so that is nothing this
version wrote) or that its component cannot decode: losing history is better than refusing to monitor.
The file is locked (``state.lock``): a second exporter on it is refused.
"""

from __future__ import annotations

import errno
import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Protocol, TypeVar

import msgspec

from se_exporter.state.database import Database
from se_exporter.state.earlier import remove_leftovers
from se_exporter.state.loading import check_writable, open_database
from se_exporter.state.lock import StateLock

# What the sections may weigh: the event store (bounded by the document bounds), the open lifecycles
# and the approval ledger, each bounded by their owners, fit in well under this.
MAX_STATE_BYTES = 16 << 20
# The database: the sections and the log spool (DEFAULT_MAX_BYTES of records in memory, about as much on
# disk), with room for sqlite's pages half full.
MAX_DATABASE_BYTES = 64 << 20
# A disk with no space (or no inodes) left at start is tolerated as it is later: counted, retried.
_DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
SAVE_WAIT_SECONDS = 30.0  # a stop waits this long for a write in flight (a throttled disk) before its own
log = logging.getLogger(__name__)
T = TypeVar("T")


class Stateful(Protocol):
    @property
    def state_version(self) -> int: ...

    def to_state(self) -> object: ...


def decode_section(section: object, schema: type[T]) -> T:
    """A section as ``schema`` (raw JSON from the file, or an already decoded value); raises
    ``msgspec.ValidationError`` or ``msgspec.DecodeError`` saying what is wrong."""
    if isinstance(section, msgspec.Raw):
        return msgspec.json.decode(section, type=schema, strict=True)
    return msgspec.convert(section, schema, strict=True)


class Persistence:
    """Saves the tracked components into the database; a no-op without a path.

    Raises ``OSError`` at construction when the file's directory cannot be written (a full disk aside)
    or when another exporter holds the file: a state file that cannot be kept is a start-up error, not
    a surprise at the first transition.
    """

    def __init__(
        self,
        path: Path | None,
        *,
        max_bytes: int = MAX_STATE_BYTES,
        observe_write: Callable[[str, float], None] = lambda _file, _seconds: None,  # each commit, fsync included
    ) -> None:
        self.path = path
        self.errors = 0  # failed saves, and unusable files at start-up: persistence_errors_total{file="state"}
        self.ok = True  # the last save succeeded (approvals wait while it did not)
        self.database: Database | None = None
        self._components: dict[str, Stateful] = {}
        self._submitted_versions: dict[str, int] = {}  # of the last snapshot handed over (written or not)
        self._lock = threading.Lock()  # the poll loop and Exporter.close both save
        self._file_lock: StateLock | None = None
        self._sections: dict[str, msgspec.Raw] = {}
        self._observe_write = observe_write
        self._requested = 0  # the generation of the last snapshot handed over
        self._listeners: list[Callable[[int], None]] = []
        if path is not None:
            self._open(path, max_bytes)

    def section(self, name: str) -> msgspec.Raw | None:
        """What was saved for ``name`` at the last run (None if nothing usable)."""
        return self._sections.get(name)

    def restore(self, name: str, from_state: Callable[[msgspec.Raw | None], T], empty: Callable[[], T]) -> T:
        """The component ``from_state`` makes of its section; one it cannot use (it raises ``ValueError`` or a
        msgspec error) is logged, counted, and the component starts ``empty()``. The section read at start is
        let go: restored once, it is the component's from now on (megabytes at 1,000 events)."""
        try:
            return from_state(self._sections.pop(name, None))
        except (ValueError, msgspec.MsgspecError) as problem:
            log.error(
                "state file %s: its %s section cannot be used (%s): starting without it", self.path, name, problem
            )
            self.errors += 1
            return empty()

    def track(self, name: str, component: Stateful) -> None:
        self._components[name] = component
        self._submitted_versions[name] = component.state_version  # as restored: nothing new to save yet

    @property
    def changed(self) -> bool:
        return any(c.state_version != self._submitted_versions.get(n) for n, c in self._components.items())

    @property
    def next_generation(self) -> int:
        """The generation the next ``flush`` that saves something will carry."""
        return self._requested + 1

    def flush(self, *, force: bool = False) -> bool:
        """Hand the writer the sections that changed since the last snapshot, or every section if ``force``
        (never waits for the disk); False if the last write failed."""
        if force or self.changed:
            self._submit(every=force)
        return self.ok

    def wait_durable(self, generation: int, timeout: float) -> bool:
        """Whether the snapshot of ``generation`` (or a newer one) is on disk within ``timeout`` seconds."""
        if self.database is None:
            return True
        return self.database.wait_durable(generation, timeout)

    def on_durable(self, listener: Callable[[int], None]) -> None:
        """``listener(generation)`` after each snapshot that reached the disk (on the writer's thread)."""
        self._listeners.append(listener)

    def save(self) -> bool:
        """Commit every section now (after whatever the writer was writing); a failure is logged (monitoring
        goes on) and returns False."""
        generation = self._submit(every=True)
        if self.database is None:
            return True
        self.database.sync(SAVE_WAIT_SECONDS)
        return self.ok and self.database.durable >= generation

    def close(self) -> None:
        """Stop the writer (what it was writing is finished first, bounded), close the file, release the lock."""
        if self.database is not None:
            self.database.close(SAVE_WAIT_SECONDS)
        if self._file_lock is not None:
            self._file_lock.release()
            self._file_lock = None

    def _submit(self, *, every: bool) -> int:
        """Hand the writer the sections changed since the last snapshot (``every``: all of them), encoded
        now; returns the generation it is. A component's section is encoded only when it changed: at 1,000
        events an approval must not rewrite the event store's megabyte."""
        with self._lock:
            versions = {name: c.state_version for name, c in self._components.items()}
            changed = [name for name in versions if every or versions[name] != self._submitted_versions.get(name)]
            self._submitted_versions = versions  # read before encoding: a change made meanwhile is saved next
            sections = {name: msgspec.json.encode(self._components[name].to_state()) for name in changed}
            self._requested += 1
            generation = self._requested
            if every:  # every component restored by now: a section none took is deleted, and let go here
                self._sections.clear()
        if self.database is None:  # no file: nothing to wait for
            self._committed(generation, False, 0.0, None)
        else:
            self.database.submit(generation, sections, tuple(versions))
        return generation

    def _committed(self, generation: int | None, spool: bool, seconds: float, failure: Exception | None) -> None:
        """What the writer reports of each commit (on its thread): every transaction is a write of the state
        file, and one that carried the spool's changes a write of the spool too."""
        if self.path is not None:
            self._observe_write("state", seconds)
            if spool:
                self._observe_write("spool", seconds)
        if generation is None:  # the spool's alone: the spool counts its own failures
            return
        if failure is not None:
            with self._lock:
                self._submitted_versions = {}  # the next flush hands over a snapshot again
            self._failed(failure)
            return
        if not self.ok:
            log.info("state file %s saved again", self.path)
        self.ok = True
        for listener in self._listeners:
            try:
                listener(generation)
            except Exception:  # one listener's bug must not stop the writer nor starve the others
                log.exception("a state file listener failed")

    def _failed(self, error: Exception) -> None:
        self.errors += 1
        if self.ok:  # one line per outage
            log.error("could not save state file %s: %s; retried at every change", self.path, error)
        self.ok = False

    def _open(self, path: Path, max_bytes: int) -> None:
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
        if removed := remove_leftovers(path):
            log.info("removed %d temporary file(s) a crash left next to %s", removed, path)
        opened = open_database(path, MAX_DATABASE_BYTES, max_bytes)
        self.errors += opened.unusable
        self.database = opened.database
        if opened.earlier_sections is None:
            sections, too_large = self.database.sections(max_bytes)
        else:  # not imported yet (a full disk): this run starts from them
            sections, too_large = opened.earlier_sections, list[str]()
        for name in too_large:
            log.error(
                "state file %s: its %s section is larger than this version writes: starting without it", path, name
            )
            self.errors += 1
        self._sections = {name: msgspec.Raw(body) for name, body in sections.items()}
        self.database.on_commit = self._committed
