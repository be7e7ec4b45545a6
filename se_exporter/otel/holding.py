"""Span batches while the collector is away: held (bounded), sent again later, or given up on, as the
OTLP specification says. ``otel/span_batches.py`` hands it the ended spans, ``otel/pipeline.py`` builds both.

Spans are not audit records: they are not spooled to disk, and losing some in a long outage is
acceptable. While the collector fails retryably, spans are held (at most ``limit`` of them and
``limit_bytes`` of their estimated size, the oldest dropped first) and tried again after a pause doubling
up to ``RETRY_CAP_SECONDS``, never sooner than the collector asked (``Retry-After``). Each request carries
at most ``request_bytes`` (and at least one item), and the next is encoded only when the last was taken:
a thousand large spans ending at once cost one small request's encoding, not a whole outage's. A refusal
not to be retried (HTTP 400, gRPC INVALID_ARGUMENT…) drops what was sent instead of sending it for ever;
a partial success counts what the collector rejected. Each outage, and each kind of refusal, is one
warning when it starts and one line when it ends, with the reason.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from se_exporter.common.outcome import Outcome
from se_exporter.imds.pacing import Backoff

log = logging.getLogger("se_exporter.otel.pipeline")
T = TypeVar("T")
RETRY_CAP_SECONDS = 120.0  # as the log shipper's: a dead collector costs one attempt per 2 minutes


class Holding(Generic[T]):
    def __init__(
        self,
        send: Callable[[Sequence[T]], Outcome],
        limit: int,
        what: str = "span",
        monotonic: Callable[[], float] = time.monotonic,
        *,
        size: Callable[[T], int],
        limit_bytes: int,
        request_bytes: int,
    ) -> None:
        self._send = send
        self._what = what
        self._monotonic = monotonic
        self._size = size
        self._limit = limit
        self._limit_bytes = limit_bytes
        self._request_bytes = request_bytes
        self._backoff = Backoff(base=1.0, cap=RETRY_CAP_SECONDS)
        self._held: deque[tuple[T, int]] = deque()
        self._held_bytes = 0
        self._resume_at = float("-inf")
        self._failing_since: float | None = None
        self._refusal = ""  # the last "not retried" reason reported, so it is said once per kind
        self.dropped = 0  # since the outage began: did not fit, refused for good, or rejected

    def offer(self, items: Sequence[T]) -> None:
        """Send ``items`` with whatever is held, now or at the next attempt."""
        for item in items:
            size = self._size(item)
            self._held.append((item, size))
            self._held_bytes += size
        while self._held and (len(self._held) > self._limit or self._held_bytes > self._limit_bytes):
            self._held_bytes -= self._held.popleft()[1]
            self.dropped += 1
        now = self._monotonic()
        if now >= self._resume_at:
            self._attempt(now)

    def flush(self) -> None:
        """One last attempt at shutdown, if anything is held (the caller bounds how long)."""
        if self._held and self._failing_since is not None:
            self._attempt(self._monotonic())

    def _attempt(self, now: float) -> None:
        while self._held:
            batch = self._next_request()
            outcome = self._send(batch)
            if not outcome.accepted and outcome.retryable:
                self._failing(now, outcome)
                return
            for _ in batch:
                self._held_bytes -= self._held.popleft()[1]
            self._settled(now, outcome, len(batch))

    def _failing(self, now: float, outcome: Outcome) -> None:
        """Keep what is held; the next attempt after a growing pause (or when the collector asked)."""
        if self._failing_since is None:
            self._failing_since = now
            log.warning(
                "OTLP %s export failing (%s): up to %d %ss are held and sending is retried with a pause "
                "growing to %.0f s",
                self._what,
                outcome.problem,
                self._limit,
                self._what,
                RETRY_CAP_SECONDS,
            )
        self._resume_at = now + max(self._backoff.next_delay(), outcome.retry_after or 0.0)

    def _next_request(self) -> list[T]:
        """The oldest held items, up to ``request_bytes`` (at least one)."""
        batch: list[T] = []
        size = 0
        for item, item_size in self._held:
            if batch and size + item_size > self._request_bytes:
                break
            batch.append(item)
            size += item_size
        return batch

    def _settled(self, now: float, outcome: Outcome, count: int) -> None:
        """The batch is done with: taken (perhaps partly), or refused for good."""
        lost = outcome.rejected if outcome.accepted else count
        if lost and outcome.problem != self._refusal:
            verdict = f"{lost} of {count} {self._what}s" + ("" if outcome.accepted else " dropped, not retried")
            log.warning("OTLP %s export: %s (%s)", self._what, verdict, outcome.problem)
            self._refusal = outcome.problem
        self.dropped += lost
        if self._failing_since is not None:
            log.info(
                "OTLP %s export works again after %.0f s (%d %s(s) lost meanwhile)",
                self._what,
                now - self._failing_since,
                self.dropped,
                self._what,
            )
            self.dropped = 0
        self._failing_since = None
        self._resume_at = float("-inf")
        self._backoff.reset()
