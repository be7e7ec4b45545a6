"""Span batches while the collector is away: held (bounded), sent again later, or given up on, as the
OTLP specification says. SDK-free: ``otel/pipeline.py`` wraps it in the SDK's ``SpanExporter``.

Spans are not audit records: they are not spooled to disk, and losing some in a long outage is
acceptable. While the collector fails retryably, spans are held (at most ``limit``, the oldest dropped
first) and tried again after a pause doubling up to ``RETRY_CAP_SECONDS``, never sooner than the
collector asked (``Retry-After``). A refusal not to be retried (HTTP 400, gRPC INVALID_ARGUMENT…)
drops what was sent instead of sending it for ever; a partial success counts what the collector
rejected. Each outage, and each kind of refusal, is one warning when it starts and one line when it
ends, with the reason.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from se_exporter.imds.pacing import Backoff
from se_exporter.otel.outcome import Outcome

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
    ) -> None:
        self._send = send
        self._what = what
        self._monotonic = monotonic
        self._backoff = Backoff(base=1.0, cap=RETRY_CAP_SECONDS)
        self._held: deque[T] = deque(maxlen=limit)
        self._resume_at = float("-inf")
        self._failing_since: float | None = None
        self._refusal = ""  # the last "not retried" reason reported, so it is said once per kind
        self.dropped = 0  # since the outage began: did not fit, refused for good, or rejected

    def offer(self, items: Sequence[T]) -> None:
        """Send ``items`` with whatever is held, now or at the next attempt."""
        limit = self._held.maxlen or 0
        self.dropped += max(0, len(self._held) + len(items) - limit)
        self._held.extend(items)
        now = self._monotonic()
        if now >= self._resume_at:
            self._attempt(now)

    def flush(self) -> None:
        """One last attempt at shutdown, if anything is held (the caller bounds how long)."""
        if self._held and self._failing_since is not None:
            self._attempt(self._monotonic())

    def _attempt(self, now: float) -> None:
        batch = list(self._held)
        outcome = self._send(batch)
        if outcome.accepted or not outcome.retryable:
            self._held.clear()
            self._settled(now, outcome, len(batch))
            return
        if self._failing_since is None:
            self._failing_since = now
            log.warning(
                "OTLP %s export failing (%s): up to %d %ss are held and sending is retried with a pause "
                "growing to %.0f s",
                self._what,
                outcome.problem,
                self._held.maxlen,
                self._what,
                RETRY_CAP_SECONDS,
            )
        self._resume_at = now + max(self._backoff.next_delay(), outcome.retry_after or 0.0)

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
