"""The state file (``--state.file``): one section per stateful component, saved when one changed.

Components follow the ``Stateful`` protocol: ``to_state()`` returns what to save (msgspec encodes it)
and ``state_version`` moves whenever that changed. Each restores itself with its own
``from_state(section)``; this module never sees a domain type. A section that is damaged (a number
out of range, text that is not Unicode) is dropped alone and logged; losing history is better than
refusing to monitor.
"""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path
from typing import Any, Protocol

import msgspec

from se_exporter.state.atomic import check_writable, read_bytes, write_atomically

FORMAT_VERSION = 1
log = logging.getLogger(__name__)


class Stateful(Protocol):
    @property
    def state_version(self) -> int: ...

    def to_state(self) -> object: ...


class Persistence:
    """Saves the tracked components into one file; a no-op without a path.

    Raises ``OSError`` at construction when the file's directory cannot be written: a state file
    that cannot be kept is a start-up error, not a surprise at the first transition.
    """

    def __init__(self, path: Path | None) -> None:
        if path is not None:
            check_writable(path.parent)
        self.path = path
        self._components: dict[str, Stateful] = {}
        self._saved_versions: dict[str, int] = {}
        self._lock = threading.Lock()  # the poll loop and Exporter.close both save
        self._sections: dict[str, object] = _load(path) if path is not None else {}
        self.errors = 0  # failed saves since start-up: persistence_errors_total{file="state"}
        self.ok = True  # the last save succeeded (approvals wait while it did not)

    def section(self, name: str) -> object:
        """What was saved for ``name`` at the last run (None if nothing usable)."""
        return self._sections.get(name)

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
            self.errors += 1
            if self.ok:  # one line per outage
                log.error("could not save state file %s: %s; retried at every change", self.path, exc)
            self.ok = False
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


def _load(path: Path) -> dict[str, object]:
    try:
        raw = read_bytes(path)
        data = json.loads(raw, parse_float=_finite) if raw is not None else {}
    except (OSError, ValueError, RecursionError) as exc:
        log.warning("ignoring unreadable state file %s: %s", path, exc)
        return {}
    if not data:
        return {}
    sections = data.get("sections") if isinstance(data, dict) else None
    if not isinstance(sections, dict) or data.get("version") != FORMAT_VERSION:
        log.warning("ignoring state file %s: not a version %d state file", path, FORMAT_VERSION)
        return {}
    usable: dict[str, object] = {}
    for name, section in sections.items():
        try:
            msgspec.json.encode(section)  # text that is not Unicode (a lone surrogate) cannot be used
        except UnicodeEncodeError:
            log.warning("ignoring the %s section of the state file %s: damaged text", name, path)
            continue
        usable[name] = section
    return usable


def _finite(text: str) -> Any:
    """A JSON number as a float; one out of range (``1e999``) becomes null, so its section fails alone."""
    value = float(text)
    return value if abs(value) != float("inf") else None
