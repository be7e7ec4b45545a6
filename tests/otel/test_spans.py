"""otel/spans.py behaves as the SDK's tracer for everything se-exporter records: the same operations on
both give the same OTLP request (ids and times aside), with the SDK's limits and status rules."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

from se_exporter.otel import otlp_proto, spans

RESOURCE = {"service.name": "se-exporter", "host.name": "vm-1"}
Script = Callable[[trace.Tracer], None]


def poll(tracer: trace.Tracer) -> None:
    """What the poll loop and the IMDS client record, a failure included."""
    with tracer.start_as_current_span("scheduled_events.poll") as span:
        with tracer.start_as_current_span("GET", kind=SpanKind.CLIENT, attributes={"server.port": 80}) as child:
            child.set_attribute("http.response.status_code", 500)
            child.set_status(Status(StatusCode.ERROR, "IMDS answered 500"))
        span.set_attributes({"scheduled_event.count": 2, "scheduled_event.changed": True, "ids": ["a", "b"]})


def lifecycle(tracer: trace.Tracer) -> None:
    """What otel/lifecycle_spans.py records: a root span with its own times, events and a link."""
    with tracer.start_as_current_span("scheduled_events.poll") as current:
        span = tracer.start_span(
            "scheduled_event.lifecycle",
            context=Context(),
            start_time=1_700_000_000_000_000_000,
            attributes={"scheduled_event.id": "E1", "scheduled_event.duration_s": -1},
            links=[Link(current.get_span_context())],
        )
        span.add_event("scheduled", {"scheduled_event.document_incarnation": 1}, timestamp=1_700_000_001_000_000_000)
        span.add_event("completed", timestamp=1_700_000_002_000_000_000)
        span.set_status(StatusCode.OK)
        span.set_status(StatusCode.ERROR, "too late: OK is final")
        span.end(end_time=1_700_000_003_000_000_000)


def failing(tracer: trace.Tracer) -> None:
    with pytest.raises(ValueError), tracer.start_as_current_span("scheduled_events.poll"):
        raise ValueError("document invalid")


def crowded(tracer: trace.Tracer) -> None:
    """Beyond the SDK's default limits: 128 attributes, events and links."""
    span = tracer.start_span("crowded", attributes={f"a{i}": i for i in range(130)})
    for i in range(130):
        span.add_event(f"e{i}", timestamp=1 + i)
        span.add_link(trace.SpanContext(1, 1 + i, False), {"n": i})
    span.end()
    span.set_attribute("after.end", True)  # ignored, as the SDK ignores it


def request(script: Script, ours: bool) -> ExportTraceServiceRequest:
    if ours:
        ended: list[Any] = []
        script(spans.TracerProvider(RESOURCE, ended.append).get_tracer("se_exporter", "1.2.3"))
        message = ExportTraceServiceRequest.FromString(otlp_proto.SpansEncoder()(ended))
    else:
        memory = InMemorySpanExporter()
        provider = SdkTracerProvider(resource=Resource(RESOURCE))
        provider.add_span_processor(SimpleSpanProcessor(memory))
        script(provider.get_tracer("se_exporter", "1.2.3"))
        message = encode_spans(memory.get_finished_spans())
    return _without_ids_and_times(message)


def _without_ids_and_times(message: ExportTraceServiceRequest) -> ExportTraceServiceRequest:
    """Random ids as their order of appearance; the clock's times as 0 (the scripts' own are kept)."""
    names: dict[bytes, bytes] = {}

    def rename(value: bytes) -> bytes:
        return names.setdefault(value, len(names).to_bytes(8, "big")) if value else value

    for scope_spans in message.resource_spans[0].scope_spans:
        for span in scope_spans.spans:
            ids = map(rename, (span.trace_id, span.span_id, span.parent_span_id))
            span.trace_id, span.span_id, span.parent_span_id = ids
            for link in span.links:
                link.trace_id, link.span_id = rename(link.trace_id), rename(link.span_id)
            for field in ("start_time_unix_nano", "end_time_unix_nano"):
                if getattr(span, field) > 1_750_000_000_000_000_000:  # the clock's, not the script's
                    setattr(span, field, 0)
            for event in span.events:
                if event.name == "exception":
                    event.time_unix_nano = 0
                    for attribute in event.attributes:
                        if attribute.key == "exception.stacktrace":  # the frames differ: ours, the SDK's
                            attribute.value.string_value = attribute.value.string_value.splitlines()[-1]
    return message


@pytest.mark.parametrize("script", [poll, lifecycle, failing, crowded])
def test_the_same_request_as_the_sdks_tracer(script: Script) -> None:
    assert request(script, ours=True) == request(script, ours=False)


def test_children_share_the_trace_and_name_their_parent() -> None:
    ended: list[Any] = []
    poll(spans.TracerProvider(RESOURCE, ended.append).get_tracer("se_exporter"))
    child, parent = ended
    assert child.get_span_context().trace_id == parent.get_span_context().trace_id
    assert child.parent == parent.get_span_context() and parent.parent is None
    assert trace.get_current_span() is trace.INVALID_SPAN  # the context was given back


def test_a_span_ends_once_and_then_is_not_recording() -> None:
    ended: list[Any] = []
    span = spans.TracerProvider(RESOURCE, ended.append).get_tracer("t").start_span("once")
    assert span.is_recording()
    span.end()
    span.end()
    span.update_name("renamed")
    assert ended == [span] and not span.is_recording() and span.name == "once"


def test_an_invalid_attribute_is_dropped_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    ended: list[Any] = []
    span = spans.TracerProvider(RESOURCE, ended.append).get_tracer("t").start_span("s")
    with caplog.at_level(logging.WARNING):
        span.set_attributes({"ok": "yes", "mixed": [1, "a"], "object": object(), "": 1})  # type: ignore[dict-item]
    assert span.attributes == {"ok": "yes"}
    assert "'mixed' dropped" in caplog.text and "'object' dropped" in caplog.text
