"""The OpenTelemetry pipeline: the only module that builds the SDK's providers (the rest uses the API).

Built from an ``OTelConfig`` (``otel/config.py``: what the SDK does not decide) and handed back as API
objects; no provider is ever registered globally.

- Spans: the SDK's ``TracerProvider`` (its sampler and span limits as ``OTEL_TRACES_SAMPLER`` and
  ``OTEL_SPAN_*`` say) with a ``BatchSpanProcessor`` (``OTEL_BSP_*``) for each traces exporter, each
  reported by ``otel/span_export.py``.
- Logs: the records are the SDK's (``ReadableLogRecord``), made from the durable ``Spool``'s audit records
  and handed by the ``LogShipper`` to the chosen exporter's ``export()``: a batch leaves the spool only when
  the collector took it. No ``LoggerProvider`` or batch processor: they drop records when the queue is full
  or the exporter gives up, and the spool takes their place.
- Resource: what se-exporter knows (``resource_attributes``: the service and this VM), under what the SDK
  reads from ``OTEL_RESOURCE_ATTRIBUTES`` and ``OTEL_SERVICE_NAME``, which win.

The Python logs API and SDK are still experimental: every use of them is in this module.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from opentelemetry import trace
from opentelemetry._logs import LogRecord, SeverityNumber
from opentelemetry.sdk._logs import ReadableLogRecord
from opentelemetry.sdk._logs.export import LogRecordExportResult
from opentelemetry.sdk.resources import OTELResourceDetector, Resource
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from se_exporter.audit.records import ERROR, WARN, AuditRecord, decode_record, encode_record
from se_exporter.audit.shipper import LogShipper
from se_exporter.common.outcome import Outcome
from se_exporter.durable.database import Database
from se_exporter.durable.spool import Spool
from se_exporter.errors import ConfigError
from se_exporter.otel import exporters
from se_exporter.otel.config import OTelConfig
from se_exporter.otel.span_export import ReportedSpans
from se_exporter.otel.telemetry import SHUTDOWN_SECONDS, NoTelemetry, Telemetry

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

    def close(self, timeout: float = SHUTDOWN_SECONDS) -> None:
        """Flush within a bounded time: the spool keeps whatever the collector did not take."""
        started = time.monotonic()
        if self._shipper is not None:
            self._shipper.close(timeout)
        for exporter in self._span_exporters:
            exporter.stop_pausing()
        if isinstance(self.tracer_provider, TracerProvider):
            # The last export may wait on a dead collector for its whole timeout: bound it ourselves.
            stopper = threading.Thread(target=self.tracer_provider.shutdown, name="se-exporter-span-flush", daemon=True)
            stopper.start()
            stopper.join(max(1.0, timeout - (time.monotonic() - started)))


def build_telemetry(config: OTelConfig, attributes: Mapping[str, str], database: Database, version: str) -> Telemetry:
    """Build (and start) the pipeline ``config`` describes; ``NoTelemetry`` when it describes none. The log
    spool keeps its records in ``database``'s ``spool`` table."""
    if not config.enabled:
        return NoTelemetry()
    # Ours first, then what the SDK reads from the environment, which wins (the user's explicit values).
    resource = Resource.create(dict(attributes)).merge(OTELResourceDetector().detect())
    telemetry = Pipeline(None)
    if config.traces.exporters:
        span_exporters = tuple(ReportedSpans(built) for built in exporters.build("traces", config.traces))
        provider = _tracer_provider(resource, span_exporters, config)
        telemetry = Pipeline(provider, _span_exporters=span_exporters)
    if config.logs.exporters:
        if len(config.logs.exporters) > 1:
            raise ConfigError(
                f"OTEL_LOGS_EXPORTER names {len(config.logs.exporters)} exporters: the durable log spool ships "
                "to one (name one)"
            )
        (built,) = exporters.build("logs", config.logs)
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

    def __init__(self, built: exporters.Built, resource: Resource, scope: InstrumentationScope) -> None:
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
