"""Simulated time for the IMDS simulator.

The simulator runs on a virtual wall clock that advances ``speed`` times faster than real time::

    sim_now = sim_start + (real_monotonic() - real_start) * speed

Every duration in a scenario (notice, time spent Started, loop gaps, idle reset) is in simulated
seconds, so a 15-minute Freeze notice takes 15 real seconds at ``speed=60``.

How NotBefore is written (the important choice)
------------------------------------------------
Clients such as the exporter compare NotBefore with their *real* clock. Writing the simulated wall
time would break them as soon as ``speed != 1``: simulated time runs ahead of real time, so a
NotBefore 15 simulated minutes away would look 15 real minutes away although the event starts
15 real seconds later. NotBefore is therefore emitted on the real clock, through the fixed
affine map::

    real_time(sim_t) = real_wall_start + (sim_t - sim_start) / speed

i.e. "real now + simulated time remaining / speed", but computed from anchors fixed when the clock
is created instead of from "now" at each request. A per-request computation would jitter by up
to a second between polls (RFC 1123 has whole seconds), which a client would rightly report as a
reschedule. With the fixed map the emitted NotBefore of an event never changes unless the
simulator really reschedules it, and a real-clock countdown reaches zero exactly when the
simulator starts the event. At ``speed=1`` with the default ``sim_start`` (the real wall time at
creation) the map is the identity and simulated time *is* wall time.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from email.utils import formatdate
from typing import Protocol


class Clock(Protocol):
    """What the simulator needs to know about time."""

    @property
    def speed(self) -> float: ...

    def now(self) -> float:
        """Simulated wall time, Unix seconds."""
        ...

    def real_monotonic(self) -> float:
        """Real monotonic seconds (for request and change timestamps)."""
        ...

    def real_time(self) -> float:
        """Real wall time, Unix seconds."""
        ...

    def to_real_time(self, sim_t: float) -> float:
        """The real wall time at which simulated instant ``sim_t`` happens (see module docstring)."""
        ...


def check_speed(speed: float) -> float:
    if not math.isfinite(speed) or speed <= 0:
        raise ValueError(f"speed must be a finite number > 0, got {speed!r}")
    return float(speed)


class SimClock:
    """Accelerated clock driven by injectable real time sources."""

    def __init__(
        self,
        speed: float = 1.0,
        *,
        sim_start: float | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._speed = check_speed(speed)
        self._monotonic = monotonic
        self._wall = wall
        self._real_start = monotonic()
        self._wall_start = wall()
        self._sim_start = self._wall_start if sim_start is None else sim_start

    @property
    def speed(self) -> float:
        return self._speed

    def now(self) -> float:
        return self._sim_start + (self._monotonic() - self._real_start) * self._speed

    def real_monotonic(self) -> float:
        return self._monotonic()

    def real_time(self) -> float:
        return self._wall()

    def to_real_time(self, sim_t: float) -> float:
        return self._wall_start + (sim_t - self._sim_start) / self._speed


class ManualClock(SimClock):
    """A clock that only moves when a test calls :meth:`advance` (thread-safe).

    Real time is derived from simulated time (real seconds = simulated seconds / speed), so the
    NotBefore a client sees is as deterministic as everything else.
    """

    def __init__(self, start: float = 1_650_000_000.0, speed: float = 1.0) -> None:
        self._lock = threading.Lock()
        self._elapsed_real = 0.0
        self._origin = start
        super().__init__(speed, sim_start=start, monotonic=self._fake_monotonic, wall=self._fake_wall)

    def _fake_monotonic(self) -> float:
        with self._lock:
            return self._elapsed_real

    def _fake_wall(self) -> float:
        return self._origin + self._fake_monotonic()

    def advance(self, sim_seconds: float) -> None:
        """Move simulated time forward by ``sim_seconds`` (real time by ``sim_seconds / speed``)."""
        if sim_seconds < 0:
            raise ValueError("time only moves forward")
        with self._lock:
            self._elapsed_real += sim_seconds / self.speed


def format_rfc1123(unix_seconds: float) -> str:
    """``Mon, 11 Apr 2022 22:26:58 GMT``, truncated to the whole second (as IMDS writes it)."""
    return formatdate(math.floor(unix_seconds), usegmt=True)
