"""OTLP's protobuf requests, written here: spans and log records (``otlp_answers`` reads the answers).

The generated classes (opentelemetry-proto on protobuf's runtime) cost 3.3 MiB of memory on every VM
that ships telemetry, a fifth of what the exporter with OTel on adds to a plain polling loop's memory
(BENCHMARKS.md), to build a few messages a minute. The protobuf wire format and OTLP's messages are
small and stable, so they are written here, field by field with the numbers of opentelemetry-proto's
``.proto`` files; the tests' collectors decode every request with opentelemetry-proto itself, so a field
written wrong fails a test. gRPC sends the same bytes (``otel/otlp_grpc.py``).

Proto3 rules kept: a scalar field at its default value is left out, a ``oneof`` member is written
even at its default (``AnyValue``), repeated message fields are written one after another.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from opentelemetry.trace import SpanContext, SpanKind, Status

from se_exporter.audit.records import AuditRecord

# Span.flags: the parent's is_remote is known (bit 8) and, when set, true (bit 9)
_HAS_IS_REMOTE = 0x100
_IS_REMOTE = 0x200
_KIND = {SpanKind.INTERNAL: 1, SpanKind.SERVER: 2, SpanKind.CLIENT: 3, SpanKind.PRODUCER: 4, SpanKind.CONSUMER: 5}
_VARINT, _FIXED64, _LEN, _FIXED32 = 0, 1, 2, 5
_ONE_BYTE = tuple(bytes((number,)) for number in range(0x80))
_REMEMBERED = 64  # resources and scopes kept encoded


def varint(number: int) -> bytes:
    if 0 <= number < 0x80:  # most of them: tags, lengths, small values
        return _ONE_BYTE[number]
    number &= (1 << 64) - 1  # a negative int64 is its two's complement, ten bytes
    out = bytearray()
    while number > 0x7F:
        out.append(number & 0x7F | 0x80)
        number >>= 7
    out.append(number)
    return bytes(out)


@functools.cache
def _tag(field: int, wire: int) -> bytes:
    return varint(field << 3 | wire)


def _message(field: int, payload: bytes) -> bytes:
    return _tag(field, _LEN) + varint(len(payload)) + payload


def _text(field: int, text: str | None) -> bytes:
    return _message(field, text.encode()) if text else b""


def _uint(field: int, number: int | None) -> bytes:
    return _tag(field, _VARINT) + varint(number) if number else b""


def _fixed64(field: int, number: int | None) -> bytes:
    return _tag(field, _FIXED64) + struct.pack("<Q", number) if number else b""


def _fixed32(field: int, number: int) -> bytes:
    return _tag(field, _FIXED32) + struct.pack("<I", number) if number else b""


def any_value(value: Any) -> bytes:
    """An ``AnyValue``: its one member is written even when it holds the default."""
    if value is None:
        return b""
    for kind, encode in _ANY_VALUES:  # bool before int: a bool is an int too
        if isinstance(value, kind):
            return encode(value)
    raise TypeError(f"cannot encode a {type(value).__name__} as an OTLP value")


_ANY_VALUES: tuple[tuple[type | tuple[type, ...], Callable[[Any], bytes]], ...] = (
    (bool, lambda value: _tag(2, _VARINT) + (b"\x01" if value else b"\x00")),
    (str, lambda value: _message(1, value.encode())),
    (int, lambda value: _tag(3, _VARINT) + varint(value)),
    (float, lambda value: _tag(4, _FIXED64) + struct.pack("<d", value)),
    (bytes, lambda value: _message(7, value)),
    (Mapping, lambda value: _message(6, attributes(1, value))),
    ((list, tuple), lambda value: _message(5, b"".join(_message(1, any_value(item)) for item in value))),
)


def attributes(field: int, values: Mapping[str, Any] | None) -> bytes:
    """Repeated ``KeyValue`` in ``field``."""
    return b"".join(
        _key_value(field, key, value)
        if isinstance(value, _NUMBERS) or (isinstance(value, str) and len(value) <= _REMEMBERED_TEXT)
        else _encode_key_value(field, key, value)
        for key, value in (values or {}).items()
    )


def _encode_key_value(field: int, key: str, value: Any) -> bytes:
    return _message(field, _text(1, key) + _message(2, any_value(value)))


# Most attributes repeat from span to span (every poll's span has the same keys and mostly the same
# values): each is encoded once. typed: True and 1 are different values here. Long texts (an event's
# description) are not kept: 1,024 of them could hold megabytes.
_NUMBERS = (bool, int, float)
_REMEMBERED_TEXT = 200
_key_value = functools.lru_cache(maxsize=1024, typed=True)(_encode_key_value)


def resource(values: Mapping[str, Any]) -> bytes:
    return attributes(1, values)


def scope(name: str, version: str | None) -> bytes:
    return _text(1, name) + _text(2, version)


class SpansEncoder:
    """``ExportTraceServiceRequest``s of SDK ``ReadableSpan``s, grouped by resource, then scope. A
    provider's resource and scopes are the same objects in every batch: each is encoded once (and
    grouped by identity: hashing a ``Resource`` serializes its attributes to JSON)."""

    def __init__(self) -> None:
        self._encoded: dict[int, tuple[Any, bytes]] = {}  # id -> (the object, kept so the id stays its own; bytes)

    def __call__(self, spans: Sequence[Any]) -> bytes:
        if len(self._encoded) > _REMEMBERED:  # a provider holds a few: more would be tracers made per call
            self._encoded.clear()
        groups: dict[int, dict[int, list[bytes]]] = {}
        for span in spans:
            where = groups.setdefault(self._remember(span.resource, _resource_fields), {})
            where.setdefault(self._remember(span.instrumentation_scope, _scope_fields), []).append(_span(span))
        return b"".join(
            _message(
                1,
                self._encoded[owner][1]
                + b"".join(
                    _message(2, self._encoded[where][1] + b"".join(_message(2, span) for span in encoded))
                    for where, encoded in scopes.items()
                ),
            )
            for owner, scopes in groups.items()
        )

    def _remember(self, thing: Any, encode: Callable[[Any], bytes]) -> int:
        key = id(thing)
        if key not in self._encoded:
            self._encoded[key] = (thing, encode(thing))
        return key


def _resource_fields(owner: Any) -> bytes:
    """A ``ResourceSpans``' fields but its spans: the resource and the schema URL."""
    return _message(1, resource(owner.attributes)) + _text(3, owner.schema_url)


def _scope_fields(where: Any) -> bytes:
    """A ``ScopeSpans``' fields but its spans (an SDK span may have no scope: an empty one)."""
    if where is None:
        return _message(1, b"")
    return _message(1, scope(where.name, where.version) + attributes(3, where.attributes)) + _text(3, where.schema_url)


def _span(span: Any) -> bytes:
    context: SpanContext = span.get_span_context()
    parent: SpanContext | None = span.parent
    status: Status = span.status
    flags = _HAS_IS_REMOTE | (_IS_REMOTE if parent is not None and parent.is_remote else 0)
    return b"".join(
        (
            _message(1, context.trace_id.to_bytes(16, "big")),
            _message(2, context.span_id.to_bytes(8, "big")),
            _text(3, ",".join(f"{key}={value}" for key, value in context.trace_state.items())),
            _message(4, parent.span_id.to_bytes(8, "big")) if parent is not None else b"",
            _text(5, span.name),
            _uint(6, _KIND[span.kind]),
            _fixed64(7, span.start_time),
            _fixed64(8, span.end_time),
            attributes(9, span.attributes),
            _uint(10, span.dropped_attributes),
            *(_message(11, _event(event)) for event in span.events),
            _uint(12, span.dropped_events),
            *(_message(13, _link(link)) for link in span.links),
            _uint(14, span.dropped_links),
            _message(15, _text(2, status.description) + _uint(3, status.status_code.value)),
            _fixed32(16, flags),
        )
    )


def _event(event: Any) -> bytes:
    return (
        _fixed64(1, event.timestamp)
        + _text(2, event.name)
        + attributes(3, event.attributes)
        + _uint(4, event.dropped_attributes)
    )


def _link(link: Any) -> bytes:
    context: SpanContext = link.context
    flags = _HAS_IS_REMOTE | (_IS_REMOTE if context.is_remote else 0)
    return (
        _message(1, context.trace_id.to_bytes(16, "big"))
        + _message(2, context.span_id.to_bytes(8, "big"))
        + attributes(4, link.attributes)
        + _uint(5, link.dropped_attributes)
        + _fixed32(6, flags)
    )


def logs_request(
    records: Sequence[AuditRecord], resource_bytes: bytes, scope_bytes: bytes, severity: Mapping[str, int]
) -> bytes:
    """An ``ExportLogsServiceRequest``: ``records`` of one resource and one scope (both encoded already)."""
    encoded = b"".join(_message(2, _log_record(record, severity.get(record.severity, 9))) for record in records)
    return _message(1, _message(1, resource_bytes) + _message(2, _message(1, scope_bytes) + encoded))


def _log_record(record: AuditRecord, severity_number: int) -> bytes:
    return b"".join(
        (
            _fixed64(1, record.timestamp_ns),
            _uint(2, severity_number),
            _text(3, record.severity),
            _message(5, any_value(record.body)),
            attributes(6, record.attributes),
            _fixed64(11, record.timestamp_ns),  # observed then: by the exporter, not when it was sent
            _text(12, record.event_name),
        )
    )
