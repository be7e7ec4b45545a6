"""What the OTLP test receiver decodes: typed records flattened from the protobuf requests.

Attribute values keep their OTLP types: ``string_value`` -> ``str``, ``int_value`` -> ``int``,
``bool_value`` -> ``bool``, ``double_value`` -> ``float``, ``array_value`` -> ``list``,
``kvlist_value`` -> ``dict``, ``bytes_value`` -> ``bytes``. Only logs and traces: the product
sends no OTLP metrics, so the receiver has no metrics path.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple, TypeAlias

from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

AttrValue: TypeAlias = "str | bool | int | float | bytes | list[AttrValue] | dict[str, AttrValue] | None"
Attributes: TypeAlias = dict[str, AttrValue]


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


def matches(attributes: Mapping[str, AttrValue], expected: Mapping[str, AttrValue] | None) -> bool:
    if not expected:
        return True
    return all(key in attributes and attributes[key] == value for key, value in expected.items())


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
        return trace_pb2.Status.StatusCode.Name(trace_pb2.Status.StatusCode.ValueType(self.code))


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
        return trace_pb2.Span.SpanKind.Name(trace_pb2.Span.SpanKind.ValueType(self.kind))

    @property
    def duration_ns(self) -> int:
        return self.end_time_unix_nano - self.start_time_unix_nano

    def __getitem__(self, key: str) -> AttrValue:
        return self.attributes[key]


@dataclass(frozen=True)
class RequestRecord:
    """One export request as seen by the receiver, accepted or not."""

    signal: str
    """``traces`` or ``logs``; for HTTP requests to other paths, the path."""
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
    """Number of spans or log records in the request (a refused one's too, when it could be decoded)."""
    monotonic_time: float


def flatten_logs(request: logs_service_pb2.ExportLogsServiceRequest, protocol: str) -> list[ReceivedLog]:
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


def flatten_spans(request: trace_service_pb2.ExportTraceServiceRequest, protocol: str) -> list[ReceivedSpan]:
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
