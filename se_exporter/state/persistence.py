"""Saves the state of every stateful component into one state file, and restores it."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from se_exporter.state.atomic import StateFile

log = logging.getLogger(__name__)


class Persistence:
    """Collects sections from named providers; a no-op without a state file."""

    def __init__(self, state_file: StateFile | None) -> None:
        self._file = state_file
        self._providers: dict[str, Callable[[], Any]] = {}
        self._lock = threading.Lock()  # the poll loop and the approver both save
        self._requested = False
        self.loaded: dict[str, Any] = state_file.load() if state_file else {}

    def register(self, section: str, provider: Callable[[], Any]) -> None:
        self._providers[section] = provider

    def request_save(self) -> None:
        """Ask for a save by the next ``flush``: however many components changed in a poll, one write."""
        self._requested = True

    def flush(self) -> bool:
        """Save if a save was requested since the last one."""
        return self.save() if self._requested else True

    def save(self) -> bool:
        """Write every section; a failure is logged (monitoring goes on) and returns False."""
        self._requested = False
        if self._file is None:
            return True
        with self._lock:
            sections = {name: provide() for name, provide in self._providers.items()}
            try:
                self._file.save(sections)
            except OSError as exc:
                log.error("could not save state file %s: %s", self._file.path, exc)
                return False
        return True
