"""A transition's log record belongs to no trace, whatever thread sends it (issue 45): ``LogRecord(context=
Context())`` meant "no trace", but an empty ``Context`` is falsy, so the SDK took the current context and a
record sent inside a span carried that span's trace id."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from se_exporter.audit.records import AuditRecord
from se_exporter.otel.config import parse_otel_environment
from se_exporter.otel.pipeline import LogSender, build_exporters
from tests.otlp import OTLPReceiver


def test_a_record_sent_inside_a_span_carries_no_trace(
    otlp_receiver: OTLPReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, setting in otlp_receiver.env.items():
        monkeypatch.setenv(name, setting)  # the official exporters read the process's environment
    config = parse_otel_environment(otlp_receiver.env)
    (built,) = build_exporters("logs", config.logs)
    send = LogSender(built, Resource.create({}), InstrumentationScope("test"))
    tracer = TracerProvider().get_tracer("test")
    with tracer.start_as_current_span("poll") as span:
        assert span.get_span_context().trace_id != 0
        outcome = send([AuditRecord("scheduled_event.transition", "INFO", "scheduled", {}, 1, "uid-1")])
    assert outcome.accepted
    (log,) = otlp_receiver.wait_for_logs(timeout=10)
    assert (log.trace_id, log.span_id) == ("", "")
    send.close()
