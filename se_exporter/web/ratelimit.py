"""``rate_limit`` of the web config: one token bucket for every request, as exporter-toolkit's (Go's
``rate.NewLimiter(rate.Every(interval), burst)``): ``burst`` requests at once, then one per ``interval``."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class TokenBucket:
    """``allow()`` takes a token if one is there; tokens come back one per ``interval`` seconds, at most
    ``burst`` of them. Safe from any thread."""

    def __init__(self, interval: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        self._interval, self._burst, self._clock = interval, burst, clock
        self._tokens = float(burst)
        self._at = clock()
        self._lock = threading.Lock()

    def allow(self) -> bool:
        with self._lock:
            now = self._clock()
            self._tokens = min(float(self._burst), self._tokens + max(0.0, now - self._at) / self._interval)
            self._at = now
            if self._tokens < 1:
                return False
            self._tokens -= 1
            return True
