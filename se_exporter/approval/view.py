"""What the poster relies on before every POST: the approver's latest look at the listed events (and how
old it is), and the decision saved in the state file.

The poster runs on its own thread. After the process was paused (a Freeze pauses the whole VM; so does a
SIGSTOP), it wakes up with the poll loop and, without this, would POST on what it saw before the pause: an
event may have started, or gone, meanwhile. So a POST waits (on its own thread, bounded) for a look younger
than ``fresh_within``, by both clocks (a paused VM's monotonic clock may not have moved).

A POST is sent only once the state file holds it as being sent (the approver waits up to
``SAVED_WAIT_SECONDS`` for that commit, on the poster's thread, never the poll's).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping

from se_exporter.lifecycle.transitions import EventState

FRESH_WAIT_SECONDS = 30.0  # then the recheck goes on with what there is (IMDS down: the POST fails anyway)
SAVED_WAIT_SECONDS = 60.0  # a POST not saved as being sent by then is not sent (skip reason state_unsaved)


class LatestView:
    """Guarded by the approver's lock: every method is called with it held."""

    def __init__(
        self,
        lock: threading.Lock,
        fresh_within: float,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._changed = threading.Condition(lock)
        self._fresh_within = fresh_within
        self._clock = clock
        self._monotonic = monotonic
        self.events: Mapping[str, EventState] = {}
        self.vm_name: str | None = None
        self._taken = (float("-inf"), float("-inf"))  # wall and monotonic time of the look
        self._closed = False

    def update(self, events: Mapping[str, EventState], vm_name: str | None, now: float) -> None:
        self.events, self.vm_name = events, vm_name
        self._taken = (now, self._monotonic())
        self._changed.notify_all()

    def wait_fresh(self, timeout: float = FRESH_WAIT_SECONDS) -> None:
        """Until the look is fresh, the view closed, or ``timeout`` seconds passed (the lock is released
        meanwhile, so the poll loop can bring the next look)."""
        deadline = time.monotonic() + timeout  # real time, whatever clocks were injected
        while not self._closed and self._age() > self._fresh_within:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self._changed.wait(min(left, 1.0))

    def close(self) -> None:
        self._closed = True
        self._changed.notify_all()

    def _age(self) -> float:
        wall, mono = self._taken
        return max(self._clock() - wall, self._monotonic() - mono)
