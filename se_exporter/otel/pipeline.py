"""The OpenTelemetry pipeline: the only module that imports the SDK and the OTLP exporters.

Everything is built from an ``OTelConfig`` (parsed from the injected environment by
``otel_config``) and handed back as API objects; no provider is ever registered globally.

- Traces: an SDK ``TracerProvider`` with a ``BatchSpanProcessor``. Losing spans in an outage is
  acceptable; they are not spooled. While the collector fails, spans are held in memory (bounded) and
  sent after a growing pause (``PatientSpanExporter``); the outage is logged once, not every batch.
- Logs: no ``LoggerProvider`` and no batch processor (they drop records when the queue is full or
  the exporter gives up). Records go to the durable ``Spool``; the ``LogShipper`` converts each batch
  to SDK log records here and sends it, acknowledging on success.
- OTLP/HTTP (both signals): the SDK's encoders make the request and ``otel/otlp_http.py`` sends it
  (the SDK's HTTP exporters bring ``requests``); OTLP/gRPC and the console: the SDK's exporters.

The Python logs API and SDK are still experimental: every use of them is in this module.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opentelemetry import trace
from opentelemetry._logs import LogRecord, SeverityNumber
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk._logs import ReadableLogRecord
from opentelemetry.sdk._logs.export import ConsoleLogRecordExporter, LogRecordExporter, LogRecordExportResult
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBased
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.sdk.version import __version__ as sdk_version

from se_exporter.audit.records import ERROR, WARN, AuditRecord
from se_exporter.audit.shipper import LogShipper, Send
from se_exporter.audit.spool import Spool
from se_exporter.errors import ConfigError
from se_exporter.imds.pacing import Backoff
from se_exporter.otel.config import OTelConfig, SignalConfig
from se_exporter.otel.otlp_http import OTLPHttpClient
from se_exporter.otel.telemetry import SHUTDOWN_SECONDS, NoTelemetry, Telemetry

log = logging.getLogger(__name__)
SCOPE = "se_exporter"
SPAN_RETRY_CAP_SECONDS = 120.0  # as the log shipper's: a dead collector costs one attempt per 2 minutes
HELD_SPANS = 512  # spans kept while the collector is away (about 4 minutes of polls at 1 Hz with their GETs)
_SEVERITY = {WARN: SeverityNumber.WARN, ERROR: SeverityNumber.ERROR}


@dataclass
class Pipeline:
    """The SDK's side of ``Telemetry``: a tracer provider and the log spool with its shipper."""

    tracer_provider: trace.TracerProvider
    spool: Spool | None = None
    _shipper: LogShipper | None = None
    _provider: TracerProvider | None = None

    def close(self, timeout: float = SHUTDOWN_SECONDS) -> None:
        """Flush within a bounded time: the spool keeps whatever the collector did not take."""
        started = time.monotonic()
        if self._shipper is not None:
            self._shipper.close(timeout)
        if self._provider is not None:
            # The provider's shutdown may wait 30 s per exporter on a dead collector: bound it ourselves.
            stopper = threading.Thread(target=self._provider.shutdown, name="se-exporter-span-flush", daemon=True)
            stopper.start()
            stopper.join(max(1.0, timeout - (time.monotonic() - started)))


def build_telemetry(
    config: OTelConfig, attributes: Mapping[str, str], spool_path: Path | None, version: str
) -> Telemetry:
    """Build (and start) the pipeline ``config`` describes; ``NoTelemetry`` when it describes none."""
    if not config.enabled:
        return NoTelemetry()
    resource = Resource({
        "telemetry.sdk.name": "opentelemetry", "telemetry.sdk.language": "python",
        "telemetry.sdk.version": sdk_version, **attributes,
    })
    telemetry = Pipeline(trace.NoOpTracerProvider())
    span_exporter = _span_exporter(config.traces, version)
    if span_exporter is not None:
        # Explicit sampler and limits: the SDK would otherwise read OTEL_TRACES_SAMPLER from os.environ.
        provider = TracerProvider(resource=resource, sampler=ParentBased(ALWAYS_ON), shutdown_on_exit=False)
        processor = BatchSpanProcessor(PatientSpanExporter(span_exporter), max_queue_size=HELD_SPANS,
                                       max_export_batch_size=512, schedule_delay_millis=config.span_schedule_delay_ms,
                                       export_timeout_millis=30_000)
        provider.add_span_processor(processor)
        telemetry = Pipeline(provider, _provider=provider)
    sender = _log_sender(config.logs, resource, InstrumentationScope(SCOPE, version), version)
    if sender is not None:
        telemetry.spool = Spool(spool_path)
        send, abort = sender
        telemetry._shipper = LogShipper(telemetry.spool, send, abort=abort)
        telemetry._shipper.start()
    return telemetry


def _log_sender(signal: SignalConfig, resource: Resource, scope: InstrumentationScope,
                version: str) -> tuple[Send, Callable[[], None]] | None:
    """What the log shipper calls with a batch (True: accepted), and what makes a send in progress give up."""
    def readable(batch: Sequence[AuditRecord]) -> list[ReadableLogRecord]:
        return [ReadableLogRecord(_log_record(record), resource, scope) for record in batch]

    if signal.exporter == "otlp" and signal.protocol == "http/protobuf":
        client = OTLPHttpClient(signal, _user_agent(version))
        return HttpLogSender(client, readable), client.close
    exporter = _log_exporter(signal)
    if exporter is None:
        return None
    return (lambda batch: exporter.export(readable(batch)) is LogRecordExportResult.SUCCESS), exporter.shutdown


class HttpLogSender:
    """Log-record batches as OTLP/HTTP requests. The batch the shipper retries during an outage is
    encoded once: an attempt costs one request, whatever the backlog."""

    def __init__(self, client: OTLPHttpClient,
                 readable: Callable[[Sequence[AuditRecord]], list[ReadableLogRecord]]) -> None:
        self._client = client
        self._readable = readable
        self._last: tuple[tuple[str, ...], bytes] = ((), b"")  # uids of the last batch, and its request

    def __call__(self, batch: Sequence[AuditRecord]) -> bool:
        uids = tuple(record.uid for record in batch)
        if uids != self._last[0] or not uids:
            self._last = (uids, encode_logs(self._readable(batch)).SerializeToString())
        return self._client.post(self._last[1])


def _user_agent(version: str) -> str:
    return f"se-exporter/{version} (OTLP/HTTP; OpenTelemetry SDK {sdk_version})"


class HttpSpanExporter(SpanExporter):
    """Span batches as OTLP/HTTP requests, encoded by the SDK's encoder (``otel/otlp_http.py`` sends them)."""

    def __init__(self, client: OTLPHttpClient) -> None:
        self._client = client

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        accepted = self._client.post(encode_spans(spans).SerializeToString())
        return SpanExportResult.SUCCESS if accepted else SpanExportResult.FAILURE

    def shutdown(self) -> None:
        self._client.close()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True  # nothing is held here


def _log_record(record: AuditRecord) -> LogRecord:
    return LogRecord(
        timestamp=record.timestamp_ns,
        observed_timestamp=record.timestamp_ns,  # the exporter observed it then, not when it was sent
        context=Context(),  # not part of any trace: the shipper thread's context means nothing here
        severity_text=record.severity,
        severity_number=_SEVERITY.get(record.severity, SeverityNumber.INFO),
        body=record.body,
        attributes=dict(record.attributes),
        event_name=record.event_name,
    )


class PatientSpanExporter(SpanExporter):
    """Sends span batches; after a failure it holds them (up to ``HELD_SPANS``, oldest dropped first)
    and tries again after a pause that doubles up to ``SPAN_RETRY_CAP_SECONDS``. The outage is logged
    once when it starts and once when it ends, not once per batch."""

    def __init__(self, inner: SpanExporter, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._inner = inner
        self._monotonic = monotonic
        self._backoff = Backoff(base=1.0, cap=SPAN_RETRY_CAP_SECONDS)
        self._held: deque[ReadableSpan] = deque(maxlen=HELD_SPANS)
        self._resume_at = float("-inf")
        self._failing_since: float | None = None
        self.dropped = 0  # spans that did not fit in what is held during an outage

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.dropped += max(0, len(self._held) + len(spans) - HELD_SPANS)
        self._held.extend(spans)
        now = self._monotonic()
        if now < self._resume_at:
            return SpanExportResult.SUCCESS  # held: sent with the next attempt
        return self._attempt(now)

    def shutdown(self) -> None:
        if self._held and self._failing_since is not None:
            self._attempt(self._monotonic())  # one last try (Telemetry.close bounds how long)
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self._inner.force_flush(timeout_millis)

    def _attempt(self, now: float) -> SpanExportResult:
        result = self._inner.export(list(self._held))
        if result is SpanExportResult.SUCCESS:
            if self._failing_since is not None:
                log.info("OTLP span export works again after %.0f s (%d span(s) dropped meanwhile)",
                         now - self._failing_since, self.dropped)
            self._held.clear()
            self._failing_since, self.dropped = None, 0
            self._backoff.reset()
            return result
        if self._failing_since is None:
            self._failing_since = now
            log.warning("OTLP span export failing: up to %d spans are held and sending is retried with a pause "
                        "growing to %.0f s", HELD_SPANS, SPAN_RETRY_CAP_SECONDS)
        self._resume_at = now + self._backoff.next_delay()
        return result


def _span_exporter(signal: SignalConfig, version: str) -> SpanExporter | None:
    if signal.exporter == "console":
        return ConsoleSpanExporter(out=sys.stdout)
    if signal.exporter != "otlp":
        return None
    if signal.protocol == "grpc":  # grpc costs ~12 MiB of RSS: imported only when asked for
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpanExporter

        return GrpcSpanExporter(**_grpc_arguments(signal))
    return HttpSpanExporter(OTLPHttpClient(signal, _user_agent(version)))


def _log_exporter(signal: SignalConfig) -> LogRecordExporter | None:
    """The SDK's exporter for the console and for OTLP/gRPC (OTLP/HTTP: ``_log_sender``)."""
    if signal.exporter == "console":
        return ConsoleLogRecordExporter(out=sys.stdout)
    if signal.exporter != "otlp":
        return None
    from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter as GrpcLogExporter

    return GrpcLogExporter(**_grpc_arguments(signal))


def _grpc_arguments(signal: SignalConfig) -> dict[str, Any]:
    import grpc

    insecure = signal.insecure if signal.insecure is not None else signal.endpoint.startswith("http://")
    credentials = None
    if not insecure and signal.certificate:
        credentials = grpc.ssl_channel_credentials(
            root_certificates=_read(signal.certificate),
            private_key=_read(signal.client_key) if signal.client_key else None,
            certificate_chain=_read(signal.client_certificate) if signal.client_certificate else None,
        )
    return {
        "endpoint": signal.endpoint,
        "insecure": insecure,
        "credentials": credentials,
        "headers": dict(signal.headers),
        "timeout": signal.timeout,
        "compression": grpc.Compression.Gzip if signal.compression == "gzip" else grpc.Compression.NoCompression,
    }


def _read(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as error:
        raise ConfigError(f"OTEL_EXPORTER_OTLP_*CERTIFICATE/CLIENT_KEY: cannot read {path}: {error}") from None
