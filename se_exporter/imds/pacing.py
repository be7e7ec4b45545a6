"""Request pacing: a shared IMDS rate limit and a jittered exponential backoff."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable

# IMDS throttles above 5 requests/s per VM. Spacing requests 250 ms apart keeps any
# one-second window (closed at both ends) at 5 requests or fewer, whatever mix of GET
# and POST the exporter sends, also while it backs off from faults.
IMDS_MIN_REQUEST_SPACING = 0.25


class RateLimiter:
    """Spaces calls at least ``min_interval`` seconds apart; safe to share between threads."""

    def __init__(
        self,
        min_interval: float = IMDS_MIN_REQUEST_SPACING,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], object] = time.sleep,
    ) -> None:
        self._min_interval = min_interval
        self._monotonic = monotonic
        self._sleep = sleep
        self._lock = threading.Lock()
        self._next_slot = float("-inf")

    def acquire(self) -> None:
        """Block until this caller's slot comes; slots are handed out in call order."""
        with self._lock:
            now = self._monotonic()
            slot = max(now, self._next_slot)
            self._next_slot = slot + self._min_interval
        if slot > now:
            self._sleep(slot - now)


class Backoff:
    """Exponential backoff with "equal jitter": half the delay fixed, half random.

    The fixed half guarantees the pause grows; the random half keeps a fleet of VMs
    that failed together from retrying in lockstep.
    """

    def __init__(self, base: float, cap: float, rng: random.Random | None = None) -> None:
        if base <= 0 or cap < base:
            raise ValueError(f"backoff needs 0 < base <= cap, got base={base} cap={cap}")
        self.base = base
        self.cap = cap
        self._rng = rng or random.Random()  # noqa: S311 - jitter, not cryptography
        self.attempt = 0

    def next_delay(self) -> float:
        ceiling = min(self.cap, self.base * 2.0**self.attempt)
        self.attempt = min(self.attempt + 1, 32)
        return ceiling / 2 + self._rng.uniform(0, ceiling / 2)

    def reset(self) -> None:
        self.attempt = 0
