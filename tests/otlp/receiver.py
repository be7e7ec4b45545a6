"""A real OTLP receiver for tests: OTLP/HTTP (protobuf and JSON) and OTLP/gRPC.

Both transports decode the standard ``opentelemetry-proto`` messages and feed a shared,
thread-safe :class:`TelemetryStore` that flattens them into typed Python records
(:class:`ReceivedLog`, :class:`ReceivedSpan`, :class:`ReceivedMetric`). Attribute values keep
their OTLP types: ``string_value`` -> ``str``, ``int_value`` -> ``int``, ``bool_value`` ->
``bool``, ``double_value`` -> ``float``, ``array_value`` -> ``list``, ``kvlist_value`` ->
``dict``, ``bytes_value`` -> ``bytes``.

Outage controls: :meth:`OTLPReceiver.set_unavailable` (HTTP 503 / gRPC UNAVAILABLE),
:meth:`OTLPReceiver.set_failure` (any status, optionally for the next N requests only),
:meth:`OTLPReceiver.stop` (the port is closed, open keep-alive connections are cut) and
:meth:`OTLPReceiver.start` (listens again on the *same* port).

Waiting: :meth:`TelemetryStore.wait_for_logs` / ``wait_for_spans`` / ``wait_for_requests`` /
``wait_until`` block on a Condition until the data is there or the deadline passes, then raise
:class:`ReceiverTimeout` (an ``AssertionError``) describing what was received.

Everything binds to 127.0.0.1 only.
"""

from __future__ import annotations

import base64
import contextlib
import gzip
import json
import logging
import os
import socket
import threading
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar, Final, NamedTuple, TypeAlias, TypeVar

import grpc
from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message
from google.rpc import error_details_pb2, status_pb2
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

_log = logging.getLogger(__name__)

LOOPBACK: Final = "127.0.0.1"
DEFAULT_TIMEOUT: Final = 10.0

AttrValue: TypeAlias = "str | bool | int | float | bytes | list[AttrValue] | dict[str, AttrValue] | None"
Attributes: TypeAlias = dict[str, AttrValue]

# --------------------------------------------------------------------------------------------------
# Decoding helpers
# --------------------------------------------------------------------------------------------------


def any_value_to_python(value: common_pb2.AnyValue) -> AttrValue:
    """Convert an OTLP ``AnyValue`` into the matching Python type (``None`` when unset)."""
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [any_value_to_python(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return attributes_to_dict(value.kvlist_value.values)
    if kind == "string_value_strindex":  # profiles dictionary index; never used by logs/traces
        return int(value.string_value_strindex)
    result: AttrValue = getattr(value, kind)
    return result


def attributes_to_dict(key_values: Sequence[common_pb2.KeyValue]) -> Attributes:
    """Convert a repeated ``KeyValue`` field into a dict, keeping value types."""
    return {kv.key: any_value_to_python(kv.value) for kv in key_values}


def _hex(raw: bytes) -> str:
    return raw.hex() if raw else ""


def _matches(attributes: Mapping[str, AttrValue], expected: Mapping[str, AttrValue] | None) -> bool:
    if not expected:
        return True
    return all(key in attributes and attributes[key] == value for key, value in expected.items())


# --------------------------------------------------------------------------------------------------
# Flattened records
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReceivedLog:
    """One OTLP ``LogRecord`` with its resource and scope."""

    resource: Attributes
    scope: str
    scope_version: str
    scope_attributes: Attributes
    time_unix_nano: int
    observed_time_unix_nano: int
    severity_number: int
    severity_text: str
    body: AttrValue
    attributes: Attributes
    event_name: str
    """The ``LogRecord.event_name`` field, or else the ``event.name`` attribute, or else ``""``."""
    trace_id: str
    """Lower-case hex (32 chars), ``""`` when the record is not correlated with a trace."""
    span_id: str
    flags: int
    dropped_attributes_count: int
    protocol: str
    """Transport it came in by: ``http/protobuf``, ``http/json`` or ``grpc``."""

    def __getitem__(self, key: str) -> AttrValue:
        """``log["scheduled_event.id"]`` is ``log.attributes["scheduled_event.id"]``."""
        return self.attributes[key]


class SpanEvent(NamedTuple):
    name: str
    time_unix_nano: int
    attributes: Attributes


class SpanLink(NamedTuple):
    trace_id: str
    span_id: str
    attributes: Attributes


class SpanStatus(NamedTuple):
    code: int
    """``trace_pb2.Status.StatusCode`` value: 0 UNSET, 1 OK, 2 ERROR."""
    message: str

    @property
    def code_name(self) -> str:
        """``"STATUS_CODE_UNSET"``, ``"STATUS_CODE_OK"`` or ``"STATUS_CODE_ERROR"``."""
        return str(trace_pb2.Status.StatusCode.Name(self.code))


@dataclass(frozen=True)
class ReceivedSpan:
    """One OTLP ``Span`` with its resource and scope."""

    resource: Attributes
    scope: str
    scope_version: str
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    """``""`` for a root span."""
    trace_state: str
    kind: int
    """``trace_pb2.Span.SpanKind`` value: 1 INTERNAL, 2 SERVER, 3 CLIENT, 4 PRODUCER, 5 CONSUMER."""
    start_time_unix_nano: int
    end_time_unix_nano: int
    attributes: Attributes
    events: list[SpanEvent]
    links: list[SpanLink]
    status: SpanStatus
    flags: int
    protocol: str

    @property
    def kind_name(self) -> str:
        """E.g. ``"SPAN_KIND_CLIENT"``."""
        return str(trace_pb2.Span.SpanKind.Name(self.kind))

    @property
    def duration_ns(self) -> int:
        return self.end_time_unix_nano - self.start_time_unix_nano

    def __getitem__(self, key: str) -> AttrValue:
        return self.attributes[key]


class MetricPoint(NamedTuple):
    attributes: Attributes
    time_unix_nano: int
    value: float | int | None
    """Number points: the value. Histograms/summaries: the sum (``sample_count`` holds the count)."""
    sample_count: int | None


@dataclass(frozen=True)
class ReceivedMetric:
    resource: Attributes
    scope: str
    name: str
    description: str
    unit: str
    type: str
    """``gauge``, ``sum``, ``histogram``, ``exponential_histogram`` or ``summary``."""
    points: list[MetricPoint]
    protocol: str


@dataclass(frozen=True)
class RequestRecord:
    """One export request as seen by the receiver, accepted or not."""

    signal: str
    """``traces``, ``logs``, ``metrics``; for HTTP requests to other paths, the path."""
    protocol: str
    """``http/protobuf``, ``http/json`` or ``grpc``."""
    accepted: bool
    status: int | str
    """HTTP status code, or the gRPC status code name (``"OK"``, ``"UNAVAILABLE"``…)."""
    headers: dict[str, str]
    """HTTP headers or gRPC metadata, lower-case keys (binary gRPC metadata omitted)."""
    content_type: str
    content_encoding: str
    items: int
    """Number of spans / log records / metrics decoded (0 when rejected)."""
    monotonic_time: float


# --------------------------------------------------------------------------------------------------
# Flattening
# --------------------------------------------------------------------------------------------------


def _flatten_logs(request: logs_service_pb2.ExportLogsServiceRequest, protocol: str) -> list[ReceivedLog]:
    out: list[ReceivedLog] = []
    for resource_logs in request.resource_logs:
        resource = attributes_to_dict(resource_logs.resource.attributes)
        for scope_logs in resource_logs.scope_logs:
            scope = scope_logs.scope
            scope_attributes = attributes_to_dict(scope.attributes)
            for record in scope_logs.log_records:
                attributes = attributes_to_dict(record.attributes)
                event_name = record.event_name
                if not event_name:
                    fallback = attributes.get("event.name")
                    event_name = fallback if isinstance(fallback, str) else ""
                out.append(
                    ReceivedLog(
                        resource=resource,
                        scope=scope.name,
                        scope_version=scope.version,
                        scope_attributes=scope_attributes,
                        time_unix_nano=record.time_unix_nano,
                        observed_time_unix_nano=record.observed_time_unix_nano,
                        severity_number=int(record.severity_number),
                        severity_text=record.severity_text,
                        body=any_value_to_python(record.body) if record.HasField("body") else None,
                        attributes=attributes,
                        event_name=event_name,
                        trace_id=_hex(record.trace_id),
                        span_id=_hex(record.span_id),
                        flags=record.flags,
                        dropped_attributes_count=record.dropped_attributes_count,
                        protocol=protocol,
                    )
                )
    return out


def _flatten_spans(request: trace_service_pb2.ExportTraceServiceRequest, protocol: str) -> list[ReceivedSpan]:
    out: list[ReceivedSpan] = []
    for resource_spans in request.resource_spans:
        resource = attributes_to_dict(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                out.append(
                    ReceivedSpan(
                        resource=resource,
                        scope=scope_spans.scope.name,
                        scope_version=scope_spans.scope.version,
                        name=span.name,
                        trace_id=_hex(span.trace_id),
                        span_id=_hex(span.span_id),
                        parent_span_id=_hex(span.parent_span_id),
                        trace_state=span.trace_state,
                        kind=int(span.kind),
                        start_time_unix_nano=span.start_time_unix_nano,
                        end_time_unix_nano=span.end_time_unix_nano,
                        attributes=attributes_to_dict(span.attributes),
                        events=[
                            SpanEvent(e.name, e.time_unix_nano, attributes_to_dict(e.attributes)) for e in span.events
                        ],
                        links=[
                            SpanLink(_hex(link.trace_id), _hex(link.span_id), attributes_to_dict(link.attributes))
                            for link in span.links
                        ],
                        status=SpanStatus(int(span.status.code), span.status.message),
                        flags=span.flags,
                        protocol=protocol,
                    )
                )
    return out


def _flatten_metrics(request: metrics_service_pb2.ExportMetricsServiceRequest, protocol: str) -> list[ReceivedMetric]:
    out: list[ReceivedMetric] = []
    for resource_metrics in request.resource_metrics:
        resource = attributes_to_dict(resource_metrics.resource.attributes)
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                kind = metric.WhichOneof("data") or ""
                points: list[MetricPoint] = []
                if kind in ("gauge", "sum"):
                    for p in getattr(metric, kind).data_points:
                        number: float | int | None = getattr(p, p.WhichOneof("value") or "as_int")
                        points.append(MetricPoint(attributes_to_dict(p.attributes), p.time_unix_nano, number, None))
                elif kind:
                    for p in getattr(metric, kind).data_points:
                        points.append(MetricPoint(attributes_to_dict(p.attributes), p.time_unix_nano, p.sum, p.count))
                out.append(
                    ReceivedMetric(
                        resource=resource,
                        scope=scope_metrics.scope.name,
                        name=metric.name,
                        description=metric.description,
                        unit=metric.unit,
                        type=kind,
                        points=points,
                        protocol=protocol,
                    )
                )
    return out


# --------------------------------------------------------------------------------------------------
# Store
# --------------------------------------------------------------------------------------------------


class ReceiverTimeout(AssertionError):
    """Raised by the ``wait_for_*`` helpers when the deadline passes."""


_T = TypeVar("_T")


class TelemetryStore:
    """Thread-safe store shared by receivers; every mutation notifies waiters."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._logs: list[ReceivedLog] = []
        self._spans: list[ReceivedSpan] = []
        self._metrics: list[ReceivedMetric] = []
        self._requests: list[RequestRecord] = []
        self.raw_requests: list[Message] = []
        """Every accepted request message, as decoded, for anything the flattening drops."""

    # -- ingestion (called by the receivers) -------------------------------------------------------

    def ingest(
        self,
        signal: str,
        message: Message,
        *,
        protocol: str,
        headers: Mapping[str, str],
        content_type: str = "",
        content_encoding: str = "",
    ) -> None:
        items: int
        logs: list[ReceivedLog] = []
        spans: list[ReceivedSpan] = []
        metrics: list[ReceivedMetric] = []
        if isinstance(message, logs_service_pb2.ExportLogsServiceRequest):
            logs = _flatten_logs(message, protocol)
            items = len(logs)
        elif isinstance(message, trace_service_pb2.ExportTraceServiceRequest):
            spans = _flatten_spans(message, protocol)
            items = len(spans)
        elif isinstance(message, metrics_service_pb2.ExportMetricsServiceRequest):
            metrics = _flatten_metrics(message, protocol)
            items = len(metrics)
        else:  # pragma: no cover - programming error
            raise TypeError(f"unexpected message {type(message).__name__}")
        record = RequestRecord(
            signal=signal,
            protocol=protocol,
            accepted=True,
            status=200 if protocol.startswith("http") else "OK",
            headers=dict(headers),
            content_type=content_type,
            content_encoding=content_encoding,
            items=items,
            monotonic_time=time.monotonic(),
        )
        with self._cond:
            self._logs.extend(logs)
            self._spans.extend(spans)
            self._metrics.extend(metrics)
            self.raw_requests.append(message)
            self._requests.append(record)
            self._cond.notify_all()

    def record_rejected(
        self,
        signal: str,
        *,
        protocol: str,
        status: int | str,
        headers: Mapping[str, str],
        content_type: str = "",
        content_encoding: str = "",
    ) -> None:
        record = RequestRecord(
            signal=signal,
            protocol=protocol,
            accepted=False,
            status=status,
            headers=dict(headers),
            content_type=content_type,
            content_encoding=content_encoding,
            items=0,
            monotonic_time=time.monotonic(),
        )
        with self._cond:
            self._requests.append(record)
            self._cond.notify_all()

    # -- snapshots ---------------------------------------------------------------------------------

    @property
    def logs(self) -> list[ReceivedLog]:
        with self._cond:
            return list(self._logs)

    @property
    def spans(self) -> list[ReceivedSpan]:
        with self._cond:
            return list(self._spans)

    @property
    def metrics(self) -> list[ReceivedMetric]:
        with self._cond:
            return list(self._metrics)

    @property
    def requests(self) -> list[RequestRecord]:
        with self._cond:
            return list(self._requests)

    def count_requests(
        self, signal: str | None = None, *, accepted: bool | None = None, transport: str | None = None
    ) -> int:
        """Count requests; ``transport`` is ``"http"`` or ``"grpc"`` (``None``: both)."""
        with self._cond:
            return sum(
                1
                for r in self._requests
                if (signal is None or r.signal == signal)
                and (accepted is None or r.accepted == accepted)
                and (transport is None or r.protocol.startswith(transport))
            )

    @property
    def accepted_requests(self) -> int:
        return self.count_requests(accepted=True)

    @property
    def rejected_requests(self) -> int:
        return self.count_requests(accepted=False)

    def clear(self) -> None:
        with self._cond:
            self._logs.clear()
            self._spans.clear()
            self._metrics.clear()
            self._requests.clear()
            self.raw_requests.clear()
            self._cond.notify_all()

    # -- filters -----------------------------------------------------------------------------------

    def find_logs(
        self,
        predicate: Callable[[ReceivedLog], bool] | None = None,
        *,
        event_name: str | None = None,
        attributes: Mapping[str, AttrValue] | None = None,
    ) -> list[ReceivedLog]:
        """Logs received so far that match every given criterion (``attributes`` is a subset match)."""
        return [
            log
            for log in self.logs
            if (event_name is None or log.event_name == event_name)
            and _matches(log.attributes, attributes)
            and (predicate is None or predicate(log))
        ]

    def find_spans(
        self,
        predicate: Callable[[ReceivedSpan], bool] | None = None,
        *,
        name: str | None = None,
        attributes: Mapping[str, AttrValue] | None = None,
    ) -> list[ReceivedSpan]:
        return [
            span
            for span in self.spans
            if (name is None or span.name == name)
            and _matches(span.attributes, attributes)
            and (predicate is None or predicate(span))
        ]

    # -- waiting -----------------------------------------------------------------------------------

    def wait_until(
        self,
        condition: Callable[[], _T | None],
        *,
        timeout: float = DEFAULT_TIMEOUT,
        message: str | Callable[[], str] = "condition not met",
    ) -> _T:
        """Wait until ``condition()`` is truthy (re-evaluated after each received request) and return it.

        ``condition`` runs under the store's lock: it may read the store but must not block.
        """
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                result = condition()
                if result:
                    return result
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._cond.wait(remaining)
        text = message() if callable(message) else message
        raise ReceiverTimeout(f"{text} within {timeout:.1f}s\n{self.describe()}")

    def wait_for_logs(
        self,
        predicate: Callable[[ReceivedLog], bool] | None = None,
        *,
        event_name: str | None = None,
        attributes: Mapping[str, AttrValue] | None = None,
        count: int = 1,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> list[ReceivedLog]:
        """Wait until at least ``count`` matching logs were received; return all matching logs."""
        return self._wait_for_count(
            lambda: self.find_logs(predicate, event_name=event_name, attributes=attributes), count, timeout,
            f"log(s) (event_name={event_name!r}, attributes={attributes!r}, predicate={predicate!r})",
        )

    def wait_for_spans(
        self,
        predicate: Callable[[ReceivedSpan], bool] | None = None,
        *,
        name: str | None = None,
        attributes: Mapping[str, AttrValue] | None = None,
        count: int = 1,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> list[ReceivedSpan]:
        """Wait until at least ``count`` matching spans were received; return all matching spans."""
        return self._wait_for_count(
            lambda: self.find_spans(predicate, name=name, attributes=attributes), count, timeout,
            f"span(s) (name={name!r}, attributes={attributes!r}, predicate={predicate!r})",
        )

    def wait_for_requests(
        self,
        predicate: Callable[[RequestRecord], bool] | None = None,
        *,
        signal: str | None = None,
        accepted: bool | None = None,
        count: int = 1,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> list[RequestRecord]:
        """Wait until at least ``count`` matching requests (accepted or rejected) arrived."""

        def find() -> list[RequestRecord]:
            return [
                r
                for r in self.requests
                if (signal is None or r.signal == signal)
                and (accepted is None or r.accepted == accepted)
                and (predicate is None or predicate(r))
            ]

        return self._wait_for_count(find, count, timeout, f"request(s) (signal={signal!r}, accepted={accepted!r})")

    def _wait_for_count(self, find: Callable[[], list[_T]], count: int, timeout: float, what: str) -> list[_T]:
        """Wait until ``find()`` returns at least ``count`` items; return them all."""

        def check() -> list[_T] | None:
            found = find()
            return found if len(found) >= count else None

        return self.wait_until(check, timeout=timeout, message=lambda: f"expected >= {count} {what}, got {len(find())}")

    def describe(self, limit: int = 20) -> str:
        """Human-readable summary used in timeout messages."""
        with self._cond:
            logs, spans, requests = list(self._logs), list(self._spans), list(self._requests)
        lines = [
            f"received: {len(logs)} log(s), {len(spans)} span(s); requests: "
            f"{sum(r.accepted for r in requests)} accepted, {sum(not r.accepted for r in requests)} rejected"
        ]
        lines += [
            f"  log {log.event_name or '-'} sev={log.severity_text or log.severity_number} "
            f"body={log.body!r} attrs={log.attributes!r}"
            for log in logs[-limit:]
        ]
        lines += [f"  span {span.name} attrs={span.attributes!r}" for span in spans[-limit:]]
        return "\n".join(lines)


# --------------------------------------------------------------------------------------------------
# Receivers
# --------------------------------------------------------------------------------------------------


@dataclass
class Failure:
    """How to reject requests while a failure is set."""

    http_status: int = 503
    grpc_code: grpc.StatusCode = grpc.StatusCode.UNAVAILABLE
    retry_after: float | None = None
    """Seconds; sent as HTTP ``Retry-After`` and gRPC ``google.rpc.RetryInfo`` (both honoured by the
    OTel Python exporters, so ``0`` makes them retry immediately)."""
    remaining: int | None = None
    """Reject only this many more requests, then accept again; ``None`` = until cleared."""
    message: str = "receiver unavailable (test)"


_PROTOBUF: Final = "application/x-protobuf"
_JSON: Final = "application/json"
_SIGNALS: Final[dict[str, str]] = {"/v1/traces": "traces", "/v1/logs": "logs", "/v1/metrics": "metrics"}
_REQUEST_TYPES: Final[dict[str, type[Message]]] = {
    "traces": trace_service_pb2.ExportTraceServiceRequest,
    "logs": logs_service_pb2.ExportLogsServiceRequest,
    "metrics": metrics_service_pb2.ExportMetricsServiceRequest,
}
_RESPONSE_TYPES: Final[dict[str, type[Message]]] = {
    "traces": trace_service_pb2.ExportTraceServiceResponse,
    "logs": logs_service_pb2.ExportLogsServiceResponse,
    "metrics": metrics_service_pb2.ExportMetricsServiceResponse,
}


_R = TypeVar("_R", bound="OTLPReceiver")


class OTLPReceiver:
    """Common part of the HTTP and gRPC receivers: store access, failure injection, lifecycle."""

    protocol: ClassVar[str]
    """Value for ``OTEL_EXPORTER_OTLP_PROTOCOL``."""

    def __init__(self, store: TelemetryStore | None = None, *, port: int = 0) -> None:
        self.store = store if store is not None else TelemetryStore()
        self._port = port
        self._lock = threading.Lock()
        self._failure: Failure | None = None
        self._partial: str | None = None
        self._running = False

    # -- lifecycle -----------------------------------------------------------------------------------

    def start(self) -> OTLPReceiver:
        """Listen on 127.0.0.1; the first start picks a free port, later starts reuse it."""
        with self._lock:
            if self._running:
                return self
            self._port = self._bind_and_serve(self._port)
            self._running = True
        return self

    def stop(self) -> None:
        """Close the listening socket and every open connection. Idempotent."""
        with self._lock:
            if not self._running:
                return
            self._running = False
            self._shutdown()

    def restart(self) -> None:
        self.stop()
        self.start()

    def __enter__(self: _R) -> _R:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _bind_and_serve(self, port: int) -> int:
        raise NotImplementedError

    def _shutdown(self) -> None:
        raise NotImplementedError

    @property
    def running(self) -> bool:
        return self._running

    @property
    def port(self) -> int:
        if not self._port:
            raise RuntimeError("receiver was never started")
        return self._port

    @property
    def host(self) -> str:
        return LOOPBACK

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:PORT`` (gRPC too: the ``http`` scheme means insecure)."""
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        """Environment to point an OTel SDK (or the exporter under test) at this receiver.

        Also adds 127.0.0.1 to ``NO_PROXY``/``no_proxy`` (both ``requests`` and gRPC honour
        ``HTTP(S)_PROXY``), keeping whatever the current environment already lists.
        """
        no_proxy = ",".join(
            v for v in (os.environ.get("NO_PROXY") or os.environ.get("no_proxy"), "127.0.0.1,localhost") if v
        )
        return {
            "OTEL_EXPORTER_OTLP_ENDPOINT": self.endpoint,
            "OTEL_EXPORTER_OTLP_PROTOCOL": self.protocol,
            "NO_PROXY": no_proxy,
            "no_proxy": no_proxy,
        }

    # -- failure injection ---------------------------------------------------------------------------

    def set_unavailable(self, unavailable: bool = True, *, retry_after: float | None = None) -> None:
        """``True``: answer HTTP 503 / gRPC UNAVAILABLE (retryable) to every request until reset."""
        self.set_failure(Failure(retry_after=retry_after) if unavailable else None)

    def set_failure(self, failure: Failure | None) -> None:
        """Reject requests as described (``None`` clears), e.g. ``Failure(400, INVALID_ARGUMENT)``
        for a non-retryable error or ``Failure(remaining=1, retry_after=0)`` for one transient error."""
        with self._lock:
            self._failure = failure

    def set_partial_success(self, message: str | None) -> None:
        """Take every request but reject all it holds, with ``message`` (a partial success); None clears."""
        with self._lock:
            self._partial = message

    def response(self, signal: str, request: Message) -> Message:
        """The answer to a request taken: empty, or a partial success rejecting every item in it."""
        response = _RESPONSE_TYPES[signal]()
        with self._lock:
            partial = self._partial
        if partial is not None and signal in ("logs", "traces"):
            field, items = ("rejected_log_records", _log_count(request)) if signal == "logs" else \
                ("rejected_spans", _span_count(request))
            setattr(response.partial_success, field, items)  # type: ignore[attr-defined]
            response.partial_success.error_message = partial  # type: ignore[attr-defined]
        return response

    def _take_failure(self) -> Failure | None:
        with self._lock:
            failure = self._failure
            if failure is None:
                return None
            if failure.remaining is not None:
                failure.remaining -= 1
                if failure.remaining <= 0:
                    self._failure = None
            return failure

    # -- store delegation ----------------------------------------------------------------------------

    @property
    def logs(self) -> list[ReceivedLog]:
        return self.store.logs

    @property
    def spans(self) -> list[ReceivedSpan]:
        return self.store.spans

    @property
    def metrics(self) -> list[ReceivedMetric]:
        return self.store.metrics

    @property
    def requests(self) -> list[RequestRecord]:
        return self.store.requests

    @property
    def accepted_requests(self) -> int:
        """Requests this receiver accepted (the store may be shared with the other transport)."""
        return self.store.count_requests(accepted=True, transport=self._transport)

    @property
    def rejected_requests(self) -> int:
        """Requests this receiver rejected (failure injection, bad path, type or body)."""
        return self.store.count_requests(accepted=False, transport=self._transport)

    @property
    def _transport(self) -> str:
        return "grpc" if self.protocol == "grpc" else "http"

    def wait_for_logs(
        self,
        predicate: Callable[[ReceivedLog], bool] | None = None,
        *,
        event_name: str | None = None,
        attributes: Mapping[str, AttrValue] | None = None,
        count: int = 1,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> list[ReceivedLog]:
        return self.store.wait_for_logs(
            predicate, event_name=event_name, attributes=attributes, count=count, timeout=timeout
        )

    def wait_for_spans(
        self,
        predicate: Callable[[ReceivedSpan], bool] | None = None,
        *,
        name: str | None = None,
        attributes: Mapping[str, AttrValue] | None = None,
        count: int = 1,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> list[ReceivedSpan]:
        return self.store.wait_for_spans(predicate, name=name, attributes=attributes, count=count, timeout=timeout)

    def wait_for_requests(
        self,
        predicate: Callable[[RequestRecord], bool] | None = None,
        *,
        signal: str | None = None,
        accepted: bool | None = None,
        count: int = 1,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> list[RequestRecord]:
        return self.store.wait_for_requests(predicate, signal=signal, accepted=accepted, count=count, timeout=timeout)

    def clear(self) -> None:
        self.store.clear()

    def __repr__(self) -> str:
        state = "running" if self._running else "stopped"
        port = self._port or "?"
        return f"<{type(self).__name__} {self.protocol} 127.0.0.1:{port} {state}>"


# -- HTTP ------------------------------------------------------------------------------------------


def _hex_ids_to_base64(obj: Any) -> Any:
    """OTLP/JSON encodes trace/span ids as hex; ``json_format`` expects base64 for bytes fields."""
    if isinstance(obj, dict):
        out = {}
        for key, value in obj.items():
            if key in ("traceId", "spanId", "parentSpanId", "trace_id", "span_id", "parent_span_id") and (
                isinstance(value, str) and len(value) in (16, 32)
            ):
                with contextlib.suppress(ValueError):  # else: already base64
                    value = base64.b64encode(bytes.fromhex(value)).decode()
            out[key] = _hex_ids_to_base64(value)
        return out
    if isinstance(obj, list):
        return [_hex_ids_to_base64(v) for v in obj]
    return obj


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True  # restart on the same port despite TIME_WAIT

    def __init__(self, port: int, receiver: OTLPHttpReceiver) -> None:
        self.receiver = receiver
        self.stopping = False
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        super().__init__((LOOPBACK, port), _OTLPHandler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._connections_lock:
            self._connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._connections_lock:
            self._connections.discard(request)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        with self._connections_lock:
            connections = list(self._connections)
        for conn in connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not self.stopping:
            _log.exception("OTLP test receiver: error handling request from %s", client_address)


class _OTLPHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, like a real collector
    timeout = 60
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        _log.debug("OTLP/HTTP receiver: " + format, *args)

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(chunks)
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _reply(self, status: int, body: bytes, content_type: str, extra: Mapping[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for key, value in (extra or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)

    def _reply_status(
        self, status: int, grpc_code: int, message: str, json_reply: bool, extra: Mapping[str, str] | None = None
    ) -> None:
        error = status_pb2.Status(code=grpc_code, message=message)
        if json_reply:
            self._reply(status, json_format.MessageToJson(error).encode(), _JSON, extra)
        else:
            self._reply(status, error.SerializeToString(), _PROTOBUF, extra)

    def do_POST(self) -> None:
        receiver = self.server.receiver
        store = receiver.store
        path = self.path.split("?", 1)[0]
        if len(path) > 1:
            path = path.rstrip("/")
        content_type = self.headers.get("Content-Type", "").split(";", 1)[0].strip().lower()
        encoding = self.headers.get("Content-Encoding", "").strip().lower()
        headers = {k.lower(): v for k, v in self.headers.items()}
        json_reply = content_type == _JSON
        body = self._read_body()

        protocol = "http/json" if json_reply else "http/protobuf"
        signal = _SIGNALS.get(path)

        def reject(status: int, grpc_code: int, message: str, extra: Mapping[str, str] | None = None) -> None:
            store.record_rejected(
                signal or path,
                protocol=protocol,
                status=status,
                headers=headers,
                content_type=content_type,
                content_encoding=encoding,
            )
            self._reply_status(status, grpc_code, message, json_reply, extra)

        if signal is None:
            reject(404, 5, f"unknown path {path}")
            return

        failure = receiver._take_failure()
        if failure is not None:
            extra = {} if failure.retry_after is None else {"Retry-After": f"{failure.retry_after:g}"}
            reject(failure.http_status, failure.grpc_code.value[0], failure.message, extra)
            return

        if content_type not in (_PROTOBUF, _JSON):
            reject(415, 3, f"unsupported Content-Type {content_type!r}")
            return
        try:
            if encoding == "gzip":
                body = gzip.decompress(body)
            elif encoding == "deflate":
                body = zlib.decompress(body)
            elif encoding not in ("", "identity", "none"):
                raise ValueError(f"unsupported Content-Encoding {encoding!r}")
            message = _REQUEST_TYPES[signal]()
            if json_reply:
                json_format.ParseDict(_hex_ids_to_base64(json.loads(body)), message, ignore_unknown_fields=True)
            else:
                message.ParseFromString(body)
        except (ValueError, OSError, EOFError, zlib.error, DecodeError, json_format.ParseError) as exc:
            reject(400, 3, f"cannot decode request: {exc}")
            return

        store.ingest(
            signal, message, protocol=protocol, headers=headers, content_type=content_type, content_encoding=encoding
        )
        response = receiver.response(signal, message)
        if json_reply:
            self._reply(200, json_format.MessageToJson(response).encode(), _JSON)
        else:
            self._reply(200, response.SerializeToString(), _PROTOBUF)

    def _method_not_allowed(self) -> None:
        self._reply(405, b"", "text/plain", {"Allow": "POST"})

    do_GET = do_PUT = do_DELETE = do_PATCH = _method_not_allowed


class OTLPHttpReceiver(OTLPReceiver):
    """OTLP/HTTP receiver (``/v1/traces``, ``/v1/logs``, ``/v1/metrics``; protobuf or JSON; gzip/deflate)."""

    protocol = "http/protobuf"

    def __init__(self, store: TelemetryStore | None = None, *, port: int = 0) -> None:
        super().__init__(store, port=port)
        self._server: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    def url(self, signal: str) -> str:
        """Full signal URL, e.g. ``url("logs")`` -> ``http://127.0.0.1:PORT/v1/logs`` (what the SDK
        exporters' ``endpoint=`` argument expects)."""
        return f"{self.endpoint}/v1/{signal}"

    def _bind_and_serve(self, port: int) -> int:
        deadline = time.monotonic() + 5.0
        while True:
            try:
                server = _HTTPServer(port, self)
                break
            except OSError:
                if not port or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, name=f"otlp-http-{port}", daemon=True
        )
        self._thread.start()
        return int(server.server_address[1])

    def _shutdown(self) -> None:
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is None:
            return
        server.stopping = True
        server.shutdown()  # stops accepting
        server.server_close()  # closes the listening socket
        server.close_connections()  # cuts keep-alive connections, as a dead collector would
        if thread is not None:
            thread.join(timeout=5)


# -- gRPC ------------------------------------------------------------------------------------------


class _GrpcHandler:
    def __init__(self, receiver: OTLPGrpcReceiver) -> None:
        self.receiver = receiver

    def handle(self, signal: str, request: Message, context: grpc.ServicerContext) -> Message:
        receiver = self.receiver
        headers = {key: value for key, value in context.invocation_metadata() if isinstance(value, str)}
        failure = receiver._take_failure()
        if failure is not None:
            receiver.store.record_rejected(signal, protocol="grpc", status=failure.grpc_code.name, headers=headers)
            if failure.retry_after is not None:
                delay = error_details_pb2.RetryInfo()
                delay.retry_delay.FromNanoseconds(int(failure.retry_after * 1e9))
                context.set_trailing_metadata((("google.rpc.retryinfo-bin", delay.SerializeToString()),))
            context.abort(failure.grpc_code, failure.message)
        receiver.store.ingest(signal, request, protocol="grpc", headers=headers)
        return receiver.response(signal, request)


class _TraceServicer(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, handler: _GrpcHandler) -> None:
        self._handler = handler

    def Export(self, request: Message, context: grpc.ServicerContext) -> Message:
        return self._handler.handle("traces", request, context)


class _LogsServicer(logs_service_pb2_grpc.LogsServiceServicer):
    def __init__(self, handler: _GrpcHandler) -> None:
        self._handler = handler

    def Export(self, request: Message, context: grpc.ServicerContext) -> Message:
        return self._handler.handle("logs", request, context)


class _MetricsServicer(metrics_service_pb2_grpc.MetricsServiceServicer):
    def __init__(self, handler: _GrpcHandler) -> None:
        self._handler = handler

    def Export(self, request: Message, context: grpc.ServicerContext) -> Message:
        return self._handler.handle("metrics", request, context)


class OTLPGrpcReceiver(OTLPReceiver):
    """OTLP/gRPC receiver (insecure) with the trace, logs and metrics services."""

    protocol = "grpc"

    def __init__(self, store: TelemetryStore | None = None, *, port: int = 0) -> None:
        super().__init__(store, port=port)
        self._server: grpc.Server | None = None
        self._executor: ThreadPoolExecutor | None = None

    def _bind_and_serve(self, port: int) -> int:
        deadline = time.monotonic() + 5.0
        while True:
            executor = ThreadPoolExecutor(max_workers=8, thread_name_prefix="otlp-grpc")
            # so_reuseport=0: nobody else can share the port, so stop() really makes it unreachable.
            server = grpc.server(executor, options=[("grpc.so_reuseport", 0)])
            handler = _GrpcHandler(self)
            trace_service_pb2_grpc.add_TraceServiceServicer_to_server(_TraceServicer(handler), server)  # type: ignore[no-untyped-call]
            logs_service_pb2_grpc.add_LogsServiceServicer_to_server(_LogsServicer(handler), server)  # type: ignore[no-untyped-call]
            metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(_MetricsServicer(handler), server)  # type: ignore[no-untyped-call]
            try:
                bound = server.add_insecure_port(f"{LOOPBACK}:{port}")
            except RuntimeError:
                bound = 0
            if bound:
                break
            executor.shutdown(wait=False)
            if not port or time.monotonic() > deadline:
                raise OSError(f"cannot bind OTLP/gRPC receiver to {LOOPBACK}:{port}")
            time.sleep(0.05)
        server.start()
        self._server, self._executor = server, executor
        return int(bound)

    def _shutdown(self) -> None:
        server, executor = self._server, self._executor
        self._server = self._executor = None
        if server is not None:
            server.stop(grace=None).wait(timeout=5)
        if executor is not None:
            executor.shutdown(wait=False)


def _log_count(request: Any) -> int:
    return sum(len(scope.log_records) for resource in request.resource_logs for scope in resource.scope_logs)


def _span_count(request: Any) -> int:
    return sum(len(scope.spans) for resource in request.resource_spans for scope in resource.scope_spans)
