"""otel/otlp_proto.py writes the bytes opentelemetry-proto reads, field for field what the SDK's encoders
make, and reads what collectors answer (partial successes, google.rpc.Status, RetryInfo)."""

from __future__ import annotations

import math
from typing import Any

import pytest
from google.protobuf.duration_pb2 import Duration
from google.rpc.error_details_pb2 import RetryInfo
from google.rpc.status_pb2 import Status
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry._logs import LogRecord, SeverityNumber
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsPartialSuccess,
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTracePartialSuccess,
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk._logs import ReadableLogRecord
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanKind, StatusCode
from opentelemetry.trace import Status as SpanStatus

from se_exporter.audit.records import AuditRecord
from se_exporter.otel import otlp_answers, otlp_proto

RESOURCE = Resource({"service.name": "se-exporter", "host.name": "vm-1", "answer": 42})
SEVERITY = {"INFO": 9, "WARN": 13, "ERROR": 17}
values = st.one_of(
    st.text(max_size=20),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False),
    st.lists(st.text(max_size=5), max_size=4).map(tuple),
    st.lists(st.integers(min_value=-(2**63), max_value=2**63 - 1), max_size=4).map(tuple),
)


def finished_spans(attributes: dict[str, Any]) -> list[ReadableSpan]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=RESOURCE)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("se_exporter", "1.2.3")
    with tracer.start_as_current_span("scheduled_events.poll", attributes=attributes) as parent:
        link = Link(parent.get_span_context(), {"why": "the same event"})
        with tracer.start_as_current_span("GET", kind=SpanKind.CLIENT, links=[link]) as child:
            child.add_event("scheduled_event.scheduled", {"scheduled_event.id": "E1", "count": 3})
            child.add_event("nothing")
            child.set_status(SpanStatus(StatusCode.ERROR, "IMDS answered 500"))
    other = provider.get_tracer("another-scope")
    with other.start_as_current_span("lifecycle", kind=SpanKind.INTERNAL) as span:
        span.set_status(SpanStatus(StatusCode.OK))
    return list(exporter.get_finished_spans())


def test_spans_are_what_the_sdks_encoder_makes() -> None:
    spans = finished_spans(
        {"scheduled_event.count": 0, "scheduled_event.changed": False, "ratio": 0.5, "ids": ("a", "b")}
    )
    assert ExportTraceServiceRequest.FromString(otlp_proto.SpansEncoder()(spans)) == encode_spans(spans)


@pytest.mark.parametrize("value", [1, True, 1.0, "1", 0, False, 0.0, ""])
def test_equal_values_of_other_types_stay_apart(value: Any) -> None:
    """Attributes are encoded once per key, type and value: True, 1 and 1.0 are equal in Python."""
    encoder = otlp_proto.SpansEncoder()
    for earlier in (1, True, 1.0, "1", 0, False, 0.0, ""):  # each of them seen before, in the cache
        encoder(finished_spans({"v": earlier}))
    spans = finished_spans({"v": value})
    assert ExportTraceServiceRequest.FromString(encoder(spans)) == encode_spans(spans)


@given(st.dictionaries(st.text(min_size=1, max_size=10), values, max_size=6))
def test_any_attribute_value_is_what_the_sdks_encoder_makes(attributes: dict[str, Any]) -> None:
    spans = finished_spans(attributes)
    assert ExportTraceServiceRequest.FromString(otlp_proto.SpansEncoder()(spans)) == encode_spans(spans)


def test_log_records_are_what_the_sdks_encoder_makes() -> None:
    records = [
        AuditRecord(
            "scheduled_event.transition", "INFO", "scheduled", {"a": "b", "n": -1, "t": ("x", "")}, 10**18, "u1"
        ),
        AuditRecord("scheduled_event.approval", "WARN", "", {"ok": True, "f": 1.5}, 10**18 + 1, "u2"),
        AuditRecord("scheduled_event.action", "ERROR", "failed: ü", {}, 1, "u3"),
    ]
    scope = InstrumentationScope("se_exporter", "1.2.3")
    sdk_records = [
        ReadableLogRecord(
            LogRecord(
                timestamp=r.timestamp_ns,
                observed_timestamp=r.timestamp_ns,
                context=Context(),
                severity_text=r.severity,
                severity_number=SeverityNumber(SEVERITY[r.severity]),
                body=r.body,
                attributes=dict(r.attributes),
                event_name=r.event_name,
            ),
            RESOURCE,
            scope,
        )
        for r in records
    ]
    ours = otlp_proto.logs_request(
        records, otlp_proto.resource(RESOURCE.attributes), otlp_proto.scope("se_exporter", "1.2.3"), SEVERITY
    )
    assert ExportLogsServiceRequest.FromString(ours) == encode_logs(sdk_records)


@pytest.mark.parametrize(
    "answer",
    [
        ExportTraceServiceResponse(
            partial_success=ExportTracePartialSuccess(rejected_spans=3, error_message="too big")
        ),
        ExportLogsServiceResponse(
            partial_success=ExportLogsPartialSuccess(rejected_log_records=3, error_message="too big")
        ),
    ],
)
def test_a_partial_success_is_read(answer: object) -> None:
    assert otlp_answers.partial_success(answer.SerializeToString()) == (3, "too big")  # type: ignore[attr-defined]


def test_an_empty_answer_is_a_full_success_and_other_answers_are_read_or_refused() -> None:
    assert otlp_answers.partial_success(b"") == (0, "")
    assert otlp_answers.status_message(Status(code=8, message="quota exceeded").SerializeToString()) == "quota exceeded"
    info = RetryInfo(retry_delay=Duration(seconds=2, nanos=500_000_000)).SerializeToString()
    assert math.isclose(otlp_answers.retry_delay(info), 2.5)
    for broken in (
        b"\x0a\x05ab",
        b"\x08",
        b"\x0f",
        b"\x80" * 11,
    ):  # truncated, truncated varint, wire 7, endless varint
        with pytest.raises(ValueError):
            otlp_answers.partial_success(broken)
