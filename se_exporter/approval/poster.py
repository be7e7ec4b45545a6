"""Background StartRequests POSTs: one request per batch, one at a time, timed.

The IMDS client retries 5xx/429 with backoff inside ``post_start_requests``, which can take many
seconds: running it here keeps the poll loop observing meanwhile. ``done()`` never blocks.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")

PostStartRequests = Callable[[Sequence[str]], None]


@dataclass(frozen=True, slots=True)
class PostOutcome(Generic[T]):
    items: tuple[T, ...]  # what the caller attached to the batch, in order
    latency_seconds: float  # the whole call, including the client's own retries
    error: Exception | None  # None: IMDS accepted the request


class BackgroundPoster(Generic[T]):
    def __init__(self, post_start_requests: PostStartRequests, monotonic: Callable[[], float] = time.monotonic):
        self._post = post_start_requests
        self._monotonic = monotonic
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="se-approval-post")
        self._in_flight: list[Future[PostOutcome[T]]] = []

    @property
    def running(self) -> bool:
        """True while a batch is queued or being sent (finished ones wait for ``done()``)."""
        return any(not future.done() for future in self._in_flight)

    def submit(self, event_ids: Sequence[str], items: Sequence[T]) -> None:
        self._in_flight.append(self._executor.submit(self._timed, tuple(event_ids), tuple(items)))

    def done(self) -> list[PostOutcome[T]]:
        """Outcomes of the batches that finished since the last call (never blocks)."""
        finished = [future for future in self._in_flight if future.done() and not future.cancelled()]
        self._in_flight = [future for future in self._in_flight if not future.done()]
        return [future.result() for future in finished]

    def wait(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for the batches in flight (at shutdown)."""
        wait(list(self._in_flight), timeout=timeout)

    def close(self) -> None:
        """Drop batches not yet started; one already being sent finishes on its own."""
        self._executor.shutdown(wait=False, cancel_futures=True)

    def _timed(self, event_ids: tuple[str, ...], items: tuple[T, ...]) -> PostOutcome[T]:
        started = self._monotonic()
        try:
            self._post(event_ids)
        except Exception as exc:  # reported as "failed"; IMDSError.retryable decides about a retry
            return PostOutcome(items, self._monotonic() - started, exc)
        return PostOutcome(items, self._monotonic() - started, None)
