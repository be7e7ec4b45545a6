"""The state file (``--state.file``): one section per stateful component, saved when one changed.

Components follow the ``Stateful`` protocol: ``to_state()`` returns what to save (msgspec encodes it)
and ``state_version`` moves whenever that changed. Each restores itself with its own
``from_state(section)``, decoding its raw section with ``decode_section`` (``Persistence.restore``
calls it); this module never sees a domain type.

A restart always comes up, whatever it finds: the file is read only up to ``MAX_STATE_BYTES`` (every
component bounds what it saves, so a larger file is nothing this version wrote), each section is
decoded on its own, and what cannot be used (too large, not JSON, a damaged section) is set aside,
logged and counted in ``errors`` (``persistence_errors_total{file="state"}``): losing history is
better than refusing to monitor. A file that is too large is kept as ``<state file>.discarded`` for
a person to look at. The file is locked (``state.lock``): a second exporter on it is refused.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Protocol, TypeVar

import msgspec

from se_exporter.state.atomic import (
    NotARegularFile,
    check_writable,
    read_bounded,
    remove_leftovers,
    write_atomically,
)
from se_exporter.state.lock import StateLock

FORMAT_VERSION = 1
# What a state file may weigh: the event store (bounded by the document bounds), the open lifecycles
# and the approval ledger, each bounded by their owners, fit in well under this.
MAX_STATE_BYTES = 16 << 20
# A disk with no space (or no inodes) left at start is tolerated as it is later: counted, retried.
_DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
log = logging.getLogger(__name__)
T = TypeVar("T")


class Stateful(Protocol):
    @property
    def state_version(self) -> int: ...

    def to_state(self) -> object: ...


class _StateFile(msgspec.Struct):
    version: int
    sections: dict[str, msgspec.Raw] = {}


def decode_section(section: object, schema: type[T]) -> T:
    """A section as ``schema`` (raw JSON from the file, or an already decoded value); raises
    ``msgspec.ValidationError`` or ``msgspec.DecodeError`` saying what is wrong."""
    if isinstance(section, msgspec.Raw):
        return msgspec.json.decode(section, type=schema, strict=True)
    return msgspec.convert(section, schema, strict=True)


class Persistence:
    """Saves the tracked components into one file; a no-op without a path.

    Raises ``OSError`` at construction when the file's directory cannot be written (a full disk aside)
    or when another exporter holds the file: a state file that cannot be kept is a start-up error, not
    a surprise at the first transition.
    """

    def __init__(self, path: Path | None, *, max_bytes: int = MAX_STATE_BYTES) -> None:
        self.path = path
        self.errors = 0  # failed saves, and unusable files at start-up: persistence_errors_total{file="state"}
        self.ok = True  # the last save succeeded (approvals wait while it did not)
        self._components: dict[str, Stateful] = {}
        self._saved_versions: dict[str, int] = {}
        self._lock = threading.Lock()  # the poll loop and Exporter.close both save
        self._file_lock: StateLock | None = None
        self._sections: dict[str, msgspec.Raw] = {}
        if path is not None:
            self._open(path, max_bytes)

    def section(self, name: str) -> msgspec.Raw | None:
        """What was saved for ``name`` at the last run (None if nothing usable)."""
        return self._sections.get(name)

    def restore(self, name: str, from_state: Callable[[msgspec.Raw | None], T], empty: Callable[[], T]) -> T:
        """The component ``from_state`` makes of its section; one it cannot use (it raises ``ValueError`` or a
        msgspec error) is logged, counted, and the component starts ``empty()``."""
        try:
            return from_state(self._sections.get(name))
        except (ValueError, msgspec.MsgspecError) as problem:
            log.error(
                "state file %s: its %s section cannot be used (%s): starting without it", self.path, name, problem
            )
            self.errors += 1
            return empty()

    def track(self, name: str, component: Stateful) -> None:
        self._components[name] = component
        self._saved_versions[name] = component.state_version  # as restored: nothing new to save yet

    @property
    def changed(self) -> bool:
        return any(c.state_version != self._saved_versions[n] for n, c in self._components.items())

    def flush(self) -> bool:
        """Save if a component changed since the last save; False if that save failed."""
        return self.save() if self.changed else True

    def save(self) -> bool:
        """Write every section now; a failure is logged (monitoring goes on) and returns False."""
        try:
            self.write()
        except OSError as exc:
            self._failed(exc)
            return False
        if not self.ok:
            log.info("state file %s saved again", self.path)
        self.ok = True
        return True

    def write(self) -> None:
        """Write every section now; raise ``OSError`` if the file cannot be written."""
        if self.path is None:
            return
        with self._lock:
            versions = {name: component.state_version for name, component in self._components.items()}
            sections = {name: component.to_state() for name, component in self._components.items()}
            write_atomically(self.path, msgspec.json.encode({"version": FORMAT_VERSION, "sections": sections}))
            self._saved_versions = versions

    def close(self) -> None:
        """Release the lock (the end of the process would too)."""
        if self._file_lock is not None:
            self._file_lock.release()
            self._file_lock = None

    def _failed(self, exc: OSError) -> None:
        self.errors += 1
        if self.ok:  # one line per outage
            log.error("could not save state file %s: %s; retried at every change", self.path, exc)
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
        self._sections = self._load(path, max_bytes)

    def _load(self, path: Path, max_bytes: int) -> dict[str, msgspec.Raw]:
        try:
            raw = read_bounded(path, max_bytes)
            if raw is None or not raw.strip():
                return {}
            data = msgspec.json.decode(raw, type=_StateFile)
        except NotARegularFile as exc:  # replaced by the first save (a directory makes every save fail)
            self._unusable(path, exc, "")
            return {}
        except (OSError, msgspec.MsgspecError) as exc:
            self._unusable(path, exc, self._set_aside(path))
            return {}
        if data.version != FORMAT_VERSION:
            self._unusable(path, f"not a version {FORMAT_VERSION} state file", self._set_aside(path))
            return {}
        return data.sections

    def _unusable(self, path: Path, problem: object, kept: str) -> None:
        self.errors += 1
        log.error("state file %s cannot be used (%s): starting without it%s", path, problem, kept)

    @staticmethod
    def _set_aside(path: Path) -> str:
        """Keep what cannot be used for a person to look at (one copy: the last one)."""
        aside = path.with_name(path.name + ".discarded")
        try:
            os.replace(path, aside)
        except OSError:
            return ""
        return f"; kept as {aside}"
