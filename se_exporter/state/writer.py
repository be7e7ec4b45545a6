"""The state file written off the poll loop: a disk at its IOPS cap (fsyncs of seconds on Azure) must never
hold up what the exporter shows (DESIGN.md, The disk never holds up the view).

The poll loop hands over an encoded snapshot and goes on; one thread writes it (``write_atomically``:
fsynced, renamed), the newest snapshot replacing any that waited, so a slow disk costs writes, never
memory or polls. Each snapshot has a generation; ``durable`` is the newest one on disk, and what must be
remembered before it is acted on (an action run, an approval POST) waits for its generation on its own
thread (``wait_durable``), or is told by a listener when it is.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from se_exporter.state.atomic import write_atomically

Written = Callable[[int, float, OSError | None], None]  # generation, seconds the write took, its failure


class StateWriter:
    def __init__(self, path: Path, written: Written, before: Callable[[], None] = lambda: None) -> None:
        self._path = path
        self._written = written
        self.before = before  # what must be on disk before the state that says it was done (the log spool)
        self._cond = threading.Condition()
        self._waiting: tuple[int, bytes] | None = None  # the newest snapshot not yet being written
        self._writing = False
        self.durable = 0  # the newest generation on disk
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="se-exporter-state-writer", daemon=True)
        self._thread.start()

    def submit(self, generation: int, payload: bytes) -> None:
        with self._cond:
            self._waiting = (generation, payload)  # an older one still waiting is outdated by this one
            self._cond.notify_all()

    def wait_durable(self, generation: int, timeout: float) -> bool:
        """Whether ``generation`` (or a newer one) is on disk within ``timeout`` seconds."""
        with self._cond:
            return self._cond.wait_for(lambda: self.durable >= generation or self._closed, timeout) and (
                self.durable >= generation
            )

    def drain(self, timeout: float) -> bool:
        """Wait until nothing waits or is being written; False if that took longer than ``timeout``."""
        with self._cond:
            return self._cond.wait_for(lambda: self._waiting is None and not self._writing, timeout)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._waiting is not None or self._closed)
                if self._waiting is None:  # closed, and nothing left
                    return
                (generation, payload), self._waiting = self._waiting, None
                self._writing = True
            began, failure = time.monotonic(), None
            try:
                self.before()
                write_atomically(self._path, payload)
            except OSError as error:
                failure = error
            took = time.monotonic() - began
            with self._cond:
                self._writing = False
                if failure is None:
                    self.durable = max(self.durable, generation)
                self._cond.notify_all()
            self._written(generation, took, failure)
