"""The span exporter the SDK's ``BatchSpanProcessor`` hands its batches to: the chosen exporter, with an
outage said once when it starts and once when it ends, and a pause while it lasts.

Spans are not audit records: while a collector is away they follow the SDK. After a failed export the
next one waits, for a pause doubling up to two minutes (never sooner than the collector asked), and
meanwhile the processor's queue holds the spans that end (at most ``OTEL_BSP_MAX_QUEUE_SIZE``, 512 unless
set: beyond it the SDK drops them, and it drops a batch whose export failed). Without the pause, a dead
collector would get an attempt every ``OTEL_BSP_SCHEDULE_DELAY``. The exporter's own retry lines go to debug
(``otel/sdk_logs.py``) and are said here instead: one warning per outage with the reason, one line when it
ends. A batch refused for good (HTTP 400, gRPC INVALID_ARGUMENT) is dropped, not retried, and said once
per kind of refusal.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from se_exporter.common.outcome import Outcome
from se_exporter.imds.pacing import Backoff
from se_exporter.otel.exporters import Built

log = logging.getLogger("se_exporter.otel.pipeline")
RETRY_CAP_SECONDS = 120.0  # as the log shipper's: a dead collector costs one attempt per 2 minutes


class ReportedSpans(SpanExporter):
    def __init__(self, built: Built, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._exporter = built.exporter
        self._answers = built.answers
        self._what = built.name
        self._monotonic = monotonic
        self._backoff = Backoff(base=1.0, cap=RETRY_CAP_SECONDS)
        self._resume_at = float("-inf")
        self._failing_since: float | None = None
        self._lost = 0  # spans lost since the outage began
        self._refusal = ""  # the last refusal said, so each kind is said once
        self._stopping = threading.Event()  # ends a pause at once: the last export is tried at shutdown

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        pause = self._resume_at - self._monotonic()
        if pause > 0:  # the processor's queue holds what ends meanwhile
            self._stopping.wait(pause)
        now = self._monotonic()
        if self._answers is not None:
            self._answers.begin()
        succeeded = self._exporter.export(spans) is SpanExportResult.SUCCESS
        outcome = self._answers.outcome(succeeded) if self._answers is not None else Outcome(succeeded)
        if outcome.accepted or not outcome.retryable:
            self._settled(now, outcome, len(spans))
        else:
            self._failing(now, outcome, len(spans))
        return SpanExportResult.SUCCESS if outcome.accepted else SpanExportResult.FAILURE

    def stop_pausing(self) -> None:
        """At shutdown: a paused export is tried at once, and no later one waits."""
        self._stopping.set()

    def shutdown(self) -> None:
        self._stopping.set()  # however the processor is shut down, no export waits out a pause after it
        self._exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        flushed: bool = self._exporter.force_flush(timeout_millis)
        return flushed

    def _failing(self, now: float, outcome: Outcome, count: int) -> None:
        self._lost += count
        if self._failing_since is None:
            self._failing_since = now
            log.warning(
                "OTLP span export failing (%s, exporter %s): spans wait in the SDK's queue (OTEL_BSP_MAX_QUEUE_SIZE) "
                "and sending is tried again after a pause growing to %.0f s",
                outcome.problem or "the exporter failed",
                self._what,
                RETRY_CAP_SECONDS,
            )
        self._resume_at = now + max(self._backoff.next_delay(), outcome.retry_after or 0.0)

    def _settled(self, now: float, outcome: Outcome, count: int) -> None:
        """Taken (perhaps partly), or refused for good: the collector answers."""
        lost = outcome.rejected if outcome.accepted else count
        if lost and outcome.problem != self._refusal:
            verdict = f"{lost} of {count} spans" + ("" if outcome.accepted else " dropped, not retried")
            log.warning("OTLP span export: %s (%s)", verdict, outcome.problem)
            self._refusal = outcome.problem
        if self._failing_since is not None:
            log.info(
                "OTLP span export works again after %.0f s (%d span(s) lost meanwhile)",
                now - self._failing_since,
                self._lost,
            )
        self._failing_since = None
        self._lost = 0
        self._resume_at = float("-inf")
        self._backoff.reset()
