"""Background StartRequests POSTs: one request per batch, one batch at a time, retried with backoff.

A POST can fail transiently (410 while IMDS warms up, 429, 5xx, a timeout): it is retried here, on
this thread, so the poll loop keeps observing meanwhile. Every attempt, the first included, is
preceded by a fresh decision on the latest document (``recheck``): an event that stopped matching
the policy, lost its leader, started, passed its NotBefore or disappeared while an earlier attempt
failed is dropped from the batch, never POSTed. Only IMDS errors (``errors.IMDSError``) are failures of
the POST; anything else is a bug, logged with its traceback. ``done()`` never blocks.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Generic, TypeVar

from se_exporter.errors import IMDSError
from se_exporter.imds.client import Backoff

log = logging.getLogger("se_exporter.approval")

T = TypeVar("T")

PostStartRequests = Callable[[Sequence[str]], None]


@dataclass(frozen=True, slots=True)
class Dropped(Generic[T]):
    item: T
    result: str  # "skipped" or "expired" (an ApprovalResult value)
    reason: str  # "<code>: <details>"


# The items still to POST (each with its EventId, possibly updated) and those dropped, from the latest document.
Recheck = Callable[[tuple[T, ...]], tuple[list[tuple[str, T]], list[Dropped[T]]]]


@dataclass(frozen=True, slots=True)
class PostRetry:
    """How long one batch keeps trying: Microsoft documents 410 as retryable for up to 70 s."""

    attempts: int = 5
    budget_seconds: float = 70.0
    backoff_base: float = 1.0
    backoff_cap: float = 16.0


@dataclass(frozen=True, slots=True)
class PostOutcome(Generic[T]):
    items: tuple[T, ...]  # what was (last) POSTed, in order; empty when every item was dropped
    latency_seconds: float  # the whole call, all attempts and pauses included
    error: Exception | None  # None: IMDS accepted the request (or nothing was left to POST)
    dropped: tuple[Dropped[T], ...] = ()
    attempts: int = 0


class BackgroundPoster(Generic[T]):
    def __init__(
        self,
        post_start_requests: PostStartRequests,
        recheck: Recheck[T],
        retry: PostRetry | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        pace: Callable[[], None] = lambda: None,
    ):
        self._post = post_start_requests
        self._recheck = recheck
        self._pace = pace  # waits for the POST's request slot: before the recheck, never between it and the POST
        self._retry = retry or PostRetry()
        self._monotonic = monotonic
        self._stopping = threading.Event()  # ends a pause between attempts at once
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="se-approval-post")
        self._in_flight: list[Future[PostOutcome[T]]] = []

    def submit(self, items: Sequence[T]) -> None:
        self._in_flight.append(self._executor.submit(self._send_or_fail, tuple(items)))

    def done(self) -> list[PostOutcome[T]]:
        """Outcomes of the batches that finished since the last call (never blocks)."""
        finished = [future for future in self._in_flight if future.done() and not future.cancelled()]
        self._in_flight = [future for future in self._in_flight if not future.done()]
        return [future.result() for future in finished]

    def wait(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for the batches in flight (at shutdown; pauses end at once)."""
        self._stopping.set()
        wait(list(self._in_flight), timeout=timeout)

    def close(self) -> None:
        """Drop batches not yet started; one already being sent finishes on its own."""
        self._stopping.set()
        self._executor.shutdown(wait=False, cancel_futures=True)

    def _send_or_fail(self, items: tuple[T, ...]) -> PostOutcome[T]:
        """``_send``, where a bug (anything but an IMDS error) is logged with its traceback and fails the batch,
        never retried."""
        started = self._monotonic()
        try:
            return self._send(items, started)
        except Exception as bug:
            log.exception("approval POST of %d event(s) failed unexpectedly (a bug): not retried", len(items))
            return PostOutcome(items, self._monotonic() - started, bug)

    def _send(self, items: tuple[T, ...], started: float) -> PostOutcome[T]:
        backoff = Backoff(self._retry.backoff_base, self._retry.backoff_cap)
        dropped: list[Dropped[T]] = []
        attempt = 0
        while True:
            self._pace()  # a pause of the process inside this wait is seen by the recheck that follows
            keep, gone = self._recheck(items)
            dropped += gone
            items = tuple(item for _, item in keep)
            if not items:
                return PostOutcome((), self._monotonic() - started, None, tuple(dropped), attempt)
            attempt += 1
            try:
                self._post([event_id for event_id, _ in keep])
            except IMDSError as exc:  # reported as "failed"; a retryable one is tried again, after a recheck
                delay = backoff.next_delay()
                over = self._monotonic() + delay - started > self._retry.budget_seconds
                if not exc.retryable or attempt >= self._retry.attempts or over:
                    return PostOutcome(items, self._monotonic() - started, exc, tuple(dropped), attempt)
                if self._stopping.wait(delay):  # shutting down: the approver saves it for a later retry
                    return PostOutcome(items, self._monotonic() - started, exc, tuple(dropped), attempt)
                continue
            return PostOutcome(items, self._monotonic() - started, None, tuple(dropped), attempt)
