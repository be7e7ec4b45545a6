"""The OpenTelemetry pipeline: the only module that builds the SDK's providers (the rest uses the API), from an
``OTelConfig`` (``otel/config.py``: what the SDK does not decide), handed back as API objects; no provider is
ever registered globally. Imported only when a signal is exported; gRPC only when an exporter needs it. The
Python logs API and SDK are still experimental: every use of them is in this module.

- Exporters are found as the SDK finds them (its entry points) and built as it builds them, with what
  se-exporter adds to the official OTLP ones: the timeout in the specification's unit and a watch on the
  collector's answers (``otel/answers.py``).
- Spans: the SDK's ``TracerProvider`` (its sampler and span limits as ``OTEL_TRACES_SAMPLER`` and
  ``OTEL_SPAN_*`` say) with a ``BatchSpanProcessor`` (``OTEL_BSP_*``) for each traces exporter, wrapped in
  ``ReportedSpans``. Spans are not audit records: while a collector is away they follow the SDK (its queue
  holds at most ``OTEL_BSP_MAX_QUEUE_SIZE``, and it drops a batch whose export failed). After a failed
  export the next waits, for a pause doubling up to two minutes (never sooner than the collector asked),
  where a dead collector would otherwise get an attempt every ``OTEL_BSP_SCHEDULE_DELAY``. The exporter's
  own retry lines go to debug (``logs.py``) and are said here instead: one warning per outage with the
  reason, one line when it ends. A batch refused for good (HTTP 400, gRPC INVALID_ARGUMENT) is dropped,
  not retried, and said once per kind of refusal.
- Logs: the records are the SDK's (``ReadableLogRecord``), made from the durable ``Spool``'s audit records
  and handed by the ``LogShipper`` to the chosen exporter's ``export()``: a batch leaves the spool only when
  the collector took it. No ``LoggerProvider`` or batch processor: they drop records when the queue is full
  or the exporter gives up, and the spool takes their place.
- Resource: what se-exporter knows (``resource_attributes``: the service and this VM), under what the SDK
  reads from ``OTEL_RESOURCE_ATTRIBUTES`` and ``OTEL_SERVICE_NAME``, which win.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any

from opentelemetry import trace
from opentelemetry._logs import LogRecord, SeverityNumber
from opentelemetry.sdk._logs import ReadableLogRecord
from opentelemetry.sdk._logs.export import LogRecordExportResult
from opentelemetry.sdk.resources import OTELResourceDetector, Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from se_exporter.audit.records import ERROR, WARN, AuditRecord, decode_record, encode_record
from se_exporter.audit.shipper import LogShipper
from se_exporter.common.times import time_left
from se_exporter.durable.database import Database
from se_exporter.durable.spool import Spool
from se_exporter.errors import ConfigError
from se_exporter.imds.client import Backoff
from se_exporter.otel.answers import MAX_ANSWER_BYTES, CollectorAnswers, Outcome, grpc_exporter_class
from se_exporter.otel.config import (
    ENTRY_POINT_GROUPS,
    GRPC_INSTALL,
    NoTelemetry,
    OTelConfig,
    SignalConfig,
    Telemetry,
)

# A collector's gRPC answer, decompressed, at most this (gRPC's own default is 4 MiB): as OTLP/HTTP's bound.
_GRPC_ANSWER_BOUND = (("grpc.max_receive_message_length", MAX_ANSWER_BYTES),)


@dataclass(frozen=True, slots=True)
class BuiltExporter:
    """An exporter, its entry-point name and, for the official OTLP ones, the watch on its answers."""

    name: str
    exporter: Any  # a SpanExporter or a LogRecordExporter
    answers: CollectorAnswers | None


def build_exporters(signal: str, config: SignalConfig) -> list[BuiltExporter]:
    return [_one(signal, name, config.timeout) for name in config.exporters]


def _one(signal: str, name: str, timeout: float | None) -> BuiltExporter:
    (point,) = entry_points(group=ENTRY_POINT_GROUPS[signal], name=name)  # config.py checked it is installed
    try:
        exporter_class = point.load()
        if name == "otlp_proto_grpc":
            import grpc  # noqa: F401 - what it needs, even if its module was loaded already
    except ImportError as error:
        hint = f" ({GRPC_INSTALL})" if name == "otlp_proto_grpc" else ""
        raise ConfigError(f"the {signal} exporter {name!r} cannot be loaded: {error}{hint}") from None
    if name == "otlp_proto_http":
        from se_exporter.otel.answers import CollectorSession

        answers = CollectorAnswers(_response(signal))
        session = CollectorSession(answers.http_answer, answers.http_error)
        return BuiltExporter(name, exporter_class(timeout=timeout, session=session), answers)
    if name == "otlp_proto_grpc":
        answers = CollectorAnswers(_response(signal))
        watched = grpc_exporter_class(exporter_class, answers)
        return BuiltExporter(name, watched(timeout=timeout, channel_options=_GRPC_ANSWER_BOUND), answers)
    return BuiltExporter(name, exporter_class(), None)  # the console's, a vendor's: as the SDK would build it


def _response(signal: str) -> type[Any]:
    """The protobuf class of a collector's answer to an export of ``signal``."""
    if signal == "logs":
        from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceResponse

        return ExportLogsServiceResponse
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

    return ExportTraceServiceResponse


log = logging.getLogger("se_exporter.otel.pipeline")

RETRY_CAP_SECONDS = 120.0  # as the log shipper's: a dead collector costs one attempt per 2 minutes


class ReportedSpans(SpanExporter):
    def __init__(self, built: BuiltExporter, monotonic: Callable[[], float] = time.monotonic) -> None:
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


SCOPE = "se_exporter"


# "No trace", said so that the SDK hears it: an empty Context is falsy, and the SDK then takes the current one.
_NO_TRACE = trace.set_span_in_context(trace.INVALID_SPAN)

_SEVERITY = {"INFO": SeverityNumber.INFO, WARN: SeverityNumber.WARN, ERROR: SeverityNumber.ERROR}


@dataclass
class Pipeline:
    """The tracer provider, and the log spool with its shipper."""

    tracer_provider: trace.TracerProvider | None
    spool: Spool[AuditRecord] | None = None
    _shipper: LogShipper | None = None
    _span_exporters: tuple[ReportedSpans, ...] = ()

    def ship_logs(self, spool: Spool[AuditRecord], shipper: LogShipper) -> None:
        """Records go to ``spool`` and ``shipper`` (started here) sends them on; ``close`` stops it."""
        self.spool, self._shipper = spool, shipper
        shipper.start()

    def close(self, timeout: float) -> None:
        """Flush within a bounded time: the spool keeps whatever the collector did not take."""
        deadline = time.monotonic() + timeout
        if self._shipper is not None:
            self._shipper.close(timeout)
        for exporter in self._span_exporters:
            exporter.stop_pausing()
        if isinstance(self.tracer_provider, TracerProvider):
            # The last export may wait on a dead collector for its whole timeout: bound it ourselves.
            stopper = threading.Thread(target=self.tracer_provider.shutdown, name="se-exporter-span-flush", daemon=True)
            stopper.start()
            stopper.join(max(1.0, time_left(deadline)))


def build_telemetry(config: OTelConfig, attributes: Mapping[str, str], database: Database, version: str) -> Telemetry:
    """Build (and start) the pipeline ``config`` describes; ``NoTelemetry`` when it describes none. The log
    spool keeps its records in ``database``'s ``spool`` table."""
    if not config.enabled:
        return NoTelemetry()
    # Ours first, then what the SDK reads from the environment, which wins (the user's explicit values).
    resource = Resource.create(dict(attributes)).merge(OTELResourceDetector().detect())
    telemetry = Pipeline(None)
    if config.traces.exporters:
        span_exporters = tuple(ReportedSpans(built) for built in build_exporters("traces", config.traces))
        provider = _tracer_provider(resource, span_exporters, config)
        telemetry = Pipeline(provider, _span_exporters=span_exporters)
    if config.logs.exporters:
        if len(config.logs.exporters) > 1:
            raise ConfigError(
                f"OTEL_LOGS_EXPORTER names {len(config.logs.exporters)} exporters: the durable log spool ships "
                "to one (name one)"
            )
        (built,) = build_exporters("logs", config.logs)
        send = LogSender(built, resource, InstrumentationScope(SCOPE, version))
        spool = database.spool(encode=encode_record, decode=decode_record)
        telemetry.ship_logs(spool, LogShipper(spool, send, abort=send.close, batch_size=config.log_batch_size))
    return telemetry


def _tracer_provider(resource: Resource, span_exporters: Sequence[ReportedSpans], config: OTelConfig) -> TracerProvider:
    # No sampler given: the SDK reads OTEL_TRACES_SAMPLER(_ARG) itself, and OTEL_SPAN_* for every limit left
    # None; the processor OTEL_BSP_* (its queue and batch, and the value length: ours where the user set
    # none, config.py says why).
    limits = SpanLimits(  # None: the SDK reads OTEL_(SPAN_)ATTRIBUTE_VALUE_LENGTH_LIMIT itself
        max_attribute_length=config.attribute_length, max_span_attribute_length=config.span_attribute_length
    )
    provider = TracerProvider(resource=resource, shutdown_on_exit=False, span_limits=limits)
    for exporter in span_exporters:
        processor = BatchSpanProcessor(
            exporter, max_queue_size=config.span_queue, max_export_batch_size=config.span_batch
        )
        provider.add_span_processor(processor)
    return provider


class LogSender:
    """Audit records as the SDK's log records, exported by the chosen exporter; what became of them."""

    def __init__(self, built: BuiltExporter, resource: Resource, scope: InstrumentationScope) -> None:
        self._exporter = built.exporter
        self._answers = built.answers
        self._name = built.name
        self._resource = resource
        self._scope = scope

    def __call__(self, batch: Sequence[AuditRecord]) -> Outcome:
        records = [ReadableLogRecord(_log_record(record), self._resource, self._scope) for record in batch]
        if self._answers is not None:
            self._answers.begin()
        succeeded = self._exporter.export(records) is LogRecordExportResult.SUCCESS
        if self._answers is not None:
            return self._answers.outcome(succeeded)
        return Outcome(True) if succeeded else Outcome.refused(f"the {self._name} exporter failed", retryable=True)

    def close(self) -> None:
        """Make an export in progress give up (its retries end; its request runs to its timeout at most)."""
        self._exporter.shutdown()


def _log_record(record: AuditRecord) -> LogRecord:
    attributes: dict[str, Any] = dict(record.attributes)
    return LogRecord(
        timestamp=record.timestamp_ns,
        observed_timestamp=record.timestamp_ns,  # the exporter observed it then, not when it was sent
        context=_NO_TRACE,  # not part of any trace, whatever is current on the thread that sends it
        severity_text=record.severity,
        severity_number=_SEVERITY.get(record.severity, SeverityNumber.INFO),
        body=record.body,
        attributes=attributes,
        event_name=record.event_name,
    )
