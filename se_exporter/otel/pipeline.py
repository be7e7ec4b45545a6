"""The OpenTelemetry pipeline: the only module that imports the SDK (and only for the console).

Everything is built from an ``OTelConfig`` (parsed from the injected environment by
``otel/config.py``) and handed back as API objects; no provider is ever registered globally.

- Traces to OTLP: ``otel/spans.py``'s tracer provider (the trace API, without the SDK's per-span
  machinery); ended spans gathered by ``otel/span_batches.py`` and handed to ``otel/holding.py`` (held
  while the collector is away, bounded; given up on when refused for good).
- Logs: no ``LoggerProvider`` and no batch processor (they drop records when the queue is full or the
  exporter gives up). Records go to the durable ``Spool``; the ``LogShipper`` has each batch converted
  here into an OTLP request, encoded once however often it is retried.
- Both signals, both protocols: ``otel/otlp_proto.py`` encodes the request, which ``otel/otlp_http.py``
  or ``otel/otlp_grpc.py`` sends and sorts (``common/outcome.py``); the console: the SDK's own exporters.

The Python logs API and SDK are still experimental: every use of them is in this module.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opentelemetry import trace
from opentelemetry._logs import SeverityNumber
from opentelemetry.sdk.version import __version__ as sdk_version

from se_exporter.audit.records import ERROR, WARN, AuditRecord
from se_exporter.audit.shipper import LogShipper
from se_exporter.audit.spool import Spool
from se_exporter.common.outcome import ACCEPTED, Outcome
from se_exporter.otel import otlp_answers, otlp_proto, spans
from se_exporter.otel.config import OTelConfig, SignalConfig
from se_exporter.otel.holding import Holding
from se_exporter.otel.otlp_http import OTLPHttpClient
from se_exporter.otel.span_batches import SpanBatches
from se_exporter.otel.telemetry import SHUTDOWN_SECONDS, NoTelemetry, Telemetry

SCOPE = "se_exporter"
HELD_SPANS = 512  # spans kept while the collector is away (about 4 minutes of polls at 1 Hz with their GETs)
# ...and at most this much of them (estimated: names and attribute values), so a thousand lifecycle spans of
# the largest events ending in one poll cannot hold tens of MiB; each request carries at most REQUEST_BYTES.
HELD_SPAN_BYTES = 1 << 20
REQUEST_BYTES = 256 << 10
_SEVERITY = {"INFO": SeverityNumber.INFO, WARN: SeverityNumber.WARN, ERROR: SeverityNumber.ERROR}
_SEVERITY_NUMBERS = {text: number.value for text, number in _SEVERITY.items()}
Post = Callable[[bytes], Outcome]  # sends one encoded request


@dataclass
class Pipeline:
    """The tracer provider, and the log spool with its shipper."""

    tracer_provider: trace.TracerProvider | None
    spool: Spool | None = None
    _shipper: LogShipper | None = None
    _stop_spans: Callable[[], None] | None = None

    def close(self, timeout: float = SHUTDOWN_SECONDS) -> None:
        """Flush within a bounded time: the spool keeps whatever the collector did not take."""
        started = time.monotonic()
        if self._shipper is not None:
            self._shipper.close(timeout)
        if self._stop_spans is not None:
            # The last send may wait on a dead collector: bound it ourselves.
            stopper = threading.Thread(target=self._stop_spans, name="se-exporter-span-flush", daemon=True)
            stopper.start()
            stopper.join(max(1.0, timeout - (time.monotonic() - started)))


def build_telemetry(
    config: OTelConfig, attributes: Mapping[str, str], spool_path: Path | None, version: str
) -> Telemetry:
    """Build (and start) the pipeline ``config`` describes; ``NoTelemetry`` when it describes none."""
    if not config.enabled:
        return NoTelemetry()
    resource = {
        "telemetry.sdk.name": "opentelemetry",
        "telemetry.sdk.language": "python",
        "telemetry.sdk.version": sdk_version,
        **attributes,
    }
    user_agent = f"se-exporter/{version} (OTLP; OpenTelemetry SDK {sdk_version})"
    telemetry = Pipeline(None)
    if config.traces.exporter in ("otlp", "console"):
        spans_made = _otlp_spans if config.traces.exporter == "otlp" else _console_spans
        provider, stop_spans = spans_made(config, resource, user_agent)
        telemetry = Pipeline(provider, _stop_spans=stop_spans)
    logs = _log_sender(config.logs, resource, (SCOPE, version), user_agent)
    if logs is not None:
        telemetry.spool = Spool(spool_path)
        telemetry._shipper = LogShipper(telemetry.spool, logs, abort=logs.close)
        telemetry._shipper.start()
    return telemetry


Spans = tuple[trace.TracerProvider, Callable[[], None]]  # the provider, and how to stop it within a bound


def _otlp_spans(config: OTelConfig, resource: Mapping[str, Any], user_agent: str) -> Spans:
    post, close = _client(config.traces, "traces", user_agent)
    encode = otlp_proto.SpansEncoder()
    holding: Holding[spans.Span] = Holding(
        lambda batch: post(encode(batch)),
        HELD_SPANS,
        size=span_bytes,
        limit_bytes=HELD_SPAN_BYTES,
        request_bytes=REQUEST_BYTES,
    )

    def finish() -> None:
        holding.flush()  # one last try (Pipeline.close bounds how long)
        close()

    batches: SpanBatches[spans.Span] = SpanBatches(
        holding.offer, delay=config.span_schedule_delay_ms / 1000, batch=HELD_SPANS, limit=HELD_SPANS, finish=finish
    )
    return spans.TracerProvider(resource, batches), batches.shutdown


def _console_spans(config: OTelConfig, resource: Mapping[str, Any], _user_agent: str) -> Spans:
    """The SDK's tracer and console exporter (imported for it only)."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
    from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBased

    # Explicit sampler: the SDK would otherwise read OTEL_TRACES_SAMPLER from os.environ.
    provider = TracerProvider(resource=Resource(resource), sampler=ParentBased(ALWAYS_ON), shutdown_on_exit=False)
    provider.add_span_processor(
        BatchSpanProcessor(
            ConsoleSpanExporter(out=sys.stdout),
            max_queue_size=HELD_SPANS,
            max_export_batch_size=HELD_SPANS,
            schedule_delay_millis=config.span_schedule_delay_ms,
        )
    )
    return provider, provider.shutdown


def _client(signal: SignalConfig, kind: str, user_agent: str) -> tuple[Post, Callable[[], None]]:
    """How one encoded request of ``kind`` reaches the collector, and how a send in progress is ended."""
    if signal.protocol == "grpc":  # grpc costs ~12 MiB of RSS: imported only when asked for
        from se_exporter.otel.otlp_grpc import OTLPGrpcClient

        grpc_client = OTLPGrpcClient(signal, kind, user_agent)
        return grpc_client.post, grpc_client.close
    http = OTLPHttpClient(signal, user_agent, partial_success=otlp_answers.partial_success)
    return http.post, http.close


class LogSender:
    """Log-record batches as OTLP requests. The batch the shipper retries during an outage is encoded
    once: an attempt costs one request, whatever the backlog."""

    def __init__(self, post: Post, encode: Callable[[Sequence[AuditRecord]], bytes], close: Callable[[], None]) -> None:
        self._post = post
        self._encode = encode
        self.close = close
        self._last: tuple[tuple[str, ...], bytes] = ((), b"")  # uids of the last batch, and its request

    def __call__(self, batch: Sequence[AuditRecord]) -> Outcome:
        uids = tuple(record.uid for record in batch)
        if uids != self._last[0] or not uids:
            self._last = (uids, self._encode(batch))
        return self._post(self._last[1])


def _log_sender(
    signal: SignalConfig, resource: Mapping[str, Any], scope: tuple[str, str], user_agent: str
) -> LogSender | _ConsoleLogs | None:
    if signal.exporter == "console":
        return _ConsoleLogs(resource, scope)
    if signal.exporter != "otlp":
        return None
    resource_bytes = otlp_proto.resource(resource)
    scope_bytes = otlp_proto.scope(*scope)

    def encode(batch: Sequence[AuditRecord]) -> bytes:
        return otlp_proto.logs_request(batch, resource_bytes, scope_bytes, _SEVERITY_NUMBERS)

    post, close = _client(signal, "logs", user_agent)
    return LogSender(post, encode, close)


class _ConsoleLogs:
    """The SDK's console exporter (the logs SDK is imported for it only: sending OTLP does not need it)."""

    def __init__(self, resource: Mapping[str, Any], scope: tuple[str, str]) -> None:
        from opentelemetry.sdk._logs.export import ConsoleLogRecordExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope

        self._console = ConsoleLogRecordExporter(out=sys.stdout)
        self._resource = Resource(resource)
        self._scope = InstrumentationScope(*scope)
        self.close = self._console.shutdown

    def __call__(self, batch: Sequence[AuditRecord]) -> Outcome:
        from opentelemetry._logs import LogRecord
        from opentelemetry.context import Context
        from opentelemetry.sdk._logs import ReadableLogRecord

        records = [
            LogRecord(
                timestamp=record.timestamp_ns,
                observed_timestamp=record.timestamp_ns,  # the exporter observed it then, not when it was sent
                context=Context(),  # not part of any trace: the shipper thread's context means nothing here
                severity_text=record.severity,
                severity_number=_SEVERITY.get(record.severity, SeverityNumber.INFO),
                body=record.body,
                attributes=dict(record.attributes),
                event_name=record.event_name,
            )
            for record in batch
        ]
        self._console.export([ReadableLogRecord(record, self._resource, self._scope) for record in records])
        return ACCEPTED


def span_bytes(span: Any) -> int:
    """About the span's encoded size: its names and attribute values, which dominate it (the ids and
    timestamps around them are counted as a fixed overhead)."""
    size = 64 + len(span.name) + _attributes_bytes(span.attributes)
    for event in span.events:
        size += 32 + len(event.name) + _attributes_bytes(event.attributes)
    return size


def _attributes_bytes(attributes: Mapping[str, Any] | None) -> int:
    total = 0
    for key, value in (attributes or {}).items():
        total += 8 + len(key) + _value_bytes(value)
    return total


def _value_bytes(value: Any) -> int:
    """A string's length, 12 for a number (a varint or a fixed64 and its tag), a sequence's items."""
    if isinstance(value, str):
        return 4 + len(value)
    if isinstance(value, list | tuple):
        return sum(_value_bytes(item) for item in value)
    return 12
