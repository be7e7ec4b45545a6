"""Self-tests of the OTLP test receiver, driven by the real OpenTelemetry SDK exporters."""

from __future__ import annotations

import contextlib
import gzip
import json
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
from opentelemetry._logs import SeverityNumber
from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter as GrpcLogExporter
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpanExporter
from opentelemetry.exporter.otlp.proto.http import Compression as HttpCompression
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter as HttpLogExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpanExporter
from opentelemetry.sdk._logs import LoggerProvider, ReadableLogRecord
from opentelemetry.sdk._logs.export import (
    BatchLogRecordProcessor,
    InMemoryLogRecordExporter,
    LogRecordExporter,
    LogRecordExportResult,
    SimpleLogRecordProcessor,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode

from . import Failure, OTLPGrpcReceiver, OTLPHttpReceiver, OTLPReceiver, ReceiverTimeout, TelemetryStore, fixtures

T_EVENT = 1_700_000_000_123_456_789
T_LOG = 1_700_000_001_000_000_000
TRANSITION_ATTRS: dict[str, Any] = {
    "scheduled_event.id": "602d9444-d2cd-49c7-8624-8643e7171297",
    "scheduled_event.type": "Reboot",
    "scheduled_event.resources": ["vm-0", "vm-1"],
    "scheduled_event.document_incarnation": 7,
    "scheduled_event.affects_this_vm": True,
    "scheduled_event.duration_s": -1,
    "test.ratio": 0.25,
}


# The fixtures, also when tests/conftest.py does not register otlp.fixtures.
otlp_http_receiver = fixtures.otlp_http_receiver
otlp_grpc_receiver = fixtures.otlp_grpc_receiver
otlp_receiver = fixtures.otlp_receiver


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ambient OTEL_* or proxy settings must not redirect the SDK exporters."""
    import os

    for key in list(os.environ):
        if key.startswith("OTEL_") or key.lower() in ("http_proxy", "https_proxy", "all_proxy", "grpc_proxy"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")


# -- telemetry produced by the real SDK -------------------------------------------------------------


@dataclass
class Telemetry:
    spans: Sequence[ReadableSpan]
    logs: Sequence[ReadableLogRecord]
    trace_id: str
    parent_span_id: str
    child_span_id: str


def make_telemetry() -> Telemetry:
    """Two spans (parent + CLIENT child with an event and ERROR status) and two log records."""
    resource = Resource.create({"service.name": "se-exporter-test", "cloud.provider": "azure"})
    span_sink = InMemorySpanExporter()
    tracer_provider = TracerProvider(resource=resource, shutdown_on_exit=False)
    tracer_provider.add_span_processor(SimpleSpanProcessor(span_sink))
    log_sink = InMemoryLogRecordExporter()  # type: ignore[no-untyped-call]
    logger_provider = LoggerProvider(resource=resource, shutdown_on_exit=False)
    logger_provider.add_log_record_processor(SimpleLogRecordProcessor(log_sink))

    tracer = tracer_provider.get_tracer("se_exporter.test", "0.1.0")
    logger = logger_provider.get_logger("se_exporter.test", "0.1.0")
    with tracer.start_as_current_span(
        "scheduled_events.poll", attributes={"scheduled_event.document_incarnation": 7}
    ) as parent:
        with tracer.start_as_current_span(
            "GET", kind=SpanKind.CLIENT, attributes={"http.request.method": "GET", "http.response.status_code": 200}
        ) as child:
            child.add_event(
                "scheduled_event.transition",
                {"scheduled_event.transition": "scheduled", "scheduled_event.resources": ["vm-0", "vm-1"]},
                timestamp=T_EVENT,
            )
            child.set_status(Status(StatusCode.ERROR, "boom"))
        # Inside the parent span: the log record gets its trace and span ids from the context.
        logger.emit(
            timestamp=T_LOG,
            severity_number=SeverityNumber.WARN,
            severity_text="WARN",
            body="Reboot scheduled",
            attributes=TRANSITION_ATTRS,
            event_name="scheduled_event.transition",
        )
    # Outside any span, event name only as an attribute (older convention).
    logger.emit(severity_number=SeverityNumber.INFO, body={"k": [1, 2]}, attributes={"event.name": "legacy.event"})

    parent_ctx, child_ctx = parent.get_span_context(), child.get_span_context()
    return Telemetry(
        spans=span_sink.get_finished_spans(),
        logs=log_sink.get_finished_logs(),
        trace_id=f"{parent_ctx.trace_id:032x}",
        parent_span_id=f"{parent_ctx.span_id:016x}",
        child_span_id=f"{child_ctx.span_id:016x}",
    )


@contextlib.contextmanager
def exporters(
    receiver: OTLPReceiver, *, timeout: float = 5.0, gzip_: bool = False
) -> Iterator[tuple[SpanExporter, LogRecordExporter]]:
    span_exporter: SpanExporter
    log_exporter: LogRecordExporter
    if isinstance(receiver, OTLPHttpReceiver):
        compression = HttpCompression.Gzip if gzip_ else HttpCompression.NoCompression
        span_exporter = HttpSpanExporter(endpoint=receiver.url("traces"), timeout=timeout, compression=compression)
        log_exporter = HttpLogExporter(endpoint=receiver.url("logs"), timeout=timeout, compression=compression)
    else:
        compression_ = grpc.Compression.Gzip if gzip_ else grpc.Compression.NoCompression
        span_exporter = GrpcSpanExporter(
            endpoint=receiver.endpoint, insecure=True, timeout=timeout, compression=compression_
        )
        log_exporter = GrpcLogExporter(
            endpoint=receiver.endpoint, insecure=True, timeout=timeout, compression=compression_
        )
    try:
        yield span_exporter, log_exporter
    finally:
        span_exporter.shutdown()
        log_exporter.shutdown()


def port_is_closed(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return False
    except ConnectionRefusedError:
        return True


# -- tests --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("gzip_", [False, True], ids=["plain", "gzip"])
def test_round_trip_decodes_spans_and_logs_with_types(otlp_receiver: OTLPReceiver, gzip_: bool) -> None:
    telemetry = make_telemetry()
    with exporters(otlp_receiver, gzip_=gzip_) as (span_exporter, log_exporter):
        assert span_exporter.export(telemetry.spans) is SpanExportResult.SUCCESS
        assert log_exporter.export(telemetry.logs) is LogRecordExportResult.SUCCESS

    # Spans
    spans = {s.name: s for s in otlp_receiver.wait_for_spans(count=2, timeout=5)}
    parent, child = spans["scheduled_events.poll"], spans["GET"]
    assert parent.resource["service.name"] == "se-exporter-test"
    assert parent.resource["cloud.provider"] == "azure"
    assert (parent.scope, parent.scope_version) == ("se_exporter.test", "0.1.0")
    assert parent.trace_id == child.trace_id == telemetry.trace_id
    assert parent.span_id == telemetry.parent_span_id and parent.parent_span_id == ""
    assert child.span_id == telemetry.child_span_id and child.parent_span_id == parent.span_id
    assert parent.kind_name == "SPAN_KIND_INTERNAL"
    assert child.kind_name == "SPAN_KIND_CLIENT"
    assert parent.attributes == {"scheduled_event.document_incarnation": 7}
    assert type(parent["scheduled_event.document_incarnation"]) is int
    assert child.attributes == {"http.request.method": "GET", "http.response.status_code": 200}
    assert 0 < child.start_time_unix_nano <= child.end_time_unix_nano
    assert child.status.code_name == "STATUS_CODE_ERROR" and child.status.message == "boom"
    assert parent.status.code_name == "STATUS_CODE_UNSET"
    (event,) = child.events
    name, when, attrs = event
    assert (name, when) == ("scheduled_event.transition", T_EVENT)
    assert attrs == {"scheduled_event.transition": "scheduled", "scheduled_event.resources": ["vm-0", "vm-1"]}

    # Logs
    (log,) = otlp_receiver.wait_for_logs(event_name="scheduled_event.transition", timeout=5)
    assert log.time_unix_nano == T_LOG
    assert log.observed_time_unix_nano > 0
    assert (log.severity_number, log.severity_text) == (SeverityNumber.WARN.value, "WARN")
    assert log.body == "Reboot scheduled"
    assert log.attributes == TRANSITION_ATTRS
    assert log["scheduled_event.resources"] == ["vm-0", "vm-1"]
    resources = log["scheduled_event.resources"]
    assert isinstance(resources, list) and all(type(v) is str for v in resources)
    assert type(log["scheduled_event.document_incarnation"]) is int
    assert type(log["scheduled_event.affects_this_vm"]) is bool
    assert type(log["scheduled_event.duration_s"]) is int
    assert type(log["test.ratio"]) is float
    assert (log.trace_id, log.span_id) == (telemetry.trace_id, telemetry.parent_span_id)
    assert log.resource["service.name"] == "se-exporter-test"
    assert (log.scope, log.scope_version) == ("se_exporter.test", "0.1.0")
    assert log.protocol == otlp_receiver.protocol

    (legacy,) = otlp_receiver.wait_for_logs(event_name="legacy.event", timeout=5)
    assert legacy.body == {"k": [1, 2]}
    assert (legacy.trace_id, legacy.span_id) == ("", "")
    assert legacy.severity_number == SeverityNumber.INFO.value
    assert otlp_receiver.wait_for_logs(attributes={"scheduled_event.affects_this_vm": True}) == [log]

    # Request bookkeeping
    requests = otlp_receiver.requests
    assert [(r.signal, r.accepted, r.items) for r in requests] == [("traces", True, 2), ("logs", True, 2)]
    assert (otlp_receiver.accepted_requests, otlp_receiver.rejected_requests) == (2, 0)
    assert "otel-otlp-exporter-python" in requests[0].headers["user-agent"].lower()
    if isinstance(otlp_receiver, OTLPHttpReceiver):
        assert requests[0].content_type == "application/x-protobuf"
        assert requests[0].content_encoding == ("gzip" if gzip_ else "")


def test_unavailable_then_recovers(otlp_receiver: OTLPReceiver) -> None:
    telemetry = make_telemetry()
    with exporters(otlp_receiver, timeout=5) as (span_exporter, log_exporter):
        # retry_after=0: both exporters honour Retry-After / RetryInfo, so they retry at once.
        otlp_receiver.set_unavailable(True, retry_after=0)
        start = time.monotonic()
        assert log_exporter.export(telemetry.logs) is LogRecordExportResult.FAILURE
        assert time.monotonic() - start < 15, "Retry-After: 0 honoured (the exporters' own backoff: 31 s)"
        rejected = otlp_receiver.requests
        assert len(rejected) == 6  # both exporters give up after 6 attempts
        expected_status = 503 if isinstance(otlp_receiver, OTLPHttpReceiver) else "UNAVAILABLE"
        assert {(r.signal, r.accepted, r.status) for r in rejected} == {("logs", False, expected_status)}
        assert otlp_receiver.logs == []

        otlp_receiver.set_unavailable(False)
        assert log_exporter.export(telemetry.logs) is LogRecordExportResult.SUCCESS
        assert span_exporter.export(telemetry.spans) is SpanExportResult.SUCCESS
    assert (otlp_receiver.accepted_requests, otlp_receiver.rejected_requests) == (2, 6)
    assert len(otlp_receiver.logs) == 2


def test_transient_and_permanent_failures(otlp_receiver: OTLPReceiver) -> None:
    telemetry = make_telemetry()
    with exporters(otlp_receiver, timeout=5) as (span_exporter, _):
        otlp_receiver.set_failure(Failure(remaining=1, retry_after=0))
        assert span_exporter.export(telemetry.spans) is SpanExportResult.SUCCESS  # retried once
        assert (otlp_receiver.accepted_requests, otlp_receiver.rejected_requests) == (1, 1)

        otlp_receiver.set_failure(Failure(http_status=400, grpc_code=grpc.StatusCode.INVALID_ARGUMENT))
        assert span_exporter.export(telemetry.spans) is SpanExportResult.FAILURE  # not retried
        assert (otlp_receiver.accepted_requests, otlp_receiver.rejected_requests) == (1, 2)
        otlp_receiver.set_failure(None)
    assert len(otlp_receiver.spans) == 2


def test_stop_closes_port_and_start_reuses_it(otlp_receiver: OTLPReceiver) -> None:
    telemetry = make_telemetry()
    port = otlp_receiver.port
    with exporters(otlp_receiver, timeout=2.5) as (_, log_exporter):
        assert log_exporter.export(telemetry.logs) is LogRecordExportResult.SUCCESS

        otlp_receiver.stop()
        otlp_receiver.stop()  # idempotent
        assert not otlp_receiver.running
        assert port_is_closed(port)
        # The exporter's pooled keep-alive connection / gRPC channel must not reach a stopped receiver.
        assert log_exporter.export(telemetry.logs) is LogRecordExportResult.FAILURE
        assert len(otlp_receiver.requests) == 1

        otlp_receiver.start()
        assert otlp_receiver.running and otlp_receiver.port == port
        assert otlp_receiver.endpoint == f"http://127.0.0.1:{port}"
        # Same exporter instance, same endpoint: it reconnects.
        assert log_exporter.export(telemetry.logs) is LogRecordExportResult.SUCCESS
    assert len(otlp_receiver.logs) == 4
    assert (otlp_receiver.accepted_requests, otlp_receiver.rejected_requests) == (2, 0)


def test_env_points_default_sdk_exporters_at_receiver(
    otlp_receiver: OTLPReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = otlp_receiver.env
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == otlp_receiver.endpoint
    assert env["OTEL_EXPORTER_OTLP_PROTOCOL"] == otlp_receiver.protocol
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    telemetry = make_telemetry()
    # No endpoint argument: the exporters resolve it from OTEL_EXPORTER_OTLP_ENDPOINT.
    exporter: LogRecordExporter = HttpLogExporter() if otlp_receiver.protocol == "http/protobuf" else GrpcLogExporter()
    try:
        assert exporter.export(telemetry.logs) is LogRecordExportResult.SUCCESS
    finally:
        exporter.shutdown()  # type: ignore[no-untyped-call]
    assert len(otlp_receiver.wait_for_logs(count=2, timeout=5)) == 2


def test_wait_for_logs_wakes_up_on_background_export(otlp_http_receiver: OTLPHttpReceiver) -> None:
    provider = LoggerProvider(resource=Resource.create({"service.name": "bg"}), shutdown_on_exit=False)
    provider.add_log_record_processor(
        BatchLogRecordProcessor(HttpLogExporter(endpoint=otlp_http_receiver.url("logs")), schedule_delay_millis=100)
    )
    try:
        provider.get_logger("bg").emit(body="hello", event_name="bg.event", attributes={"n": 1})
        (log,) = otlp_http_receiver.wait_for_logs(event_name="bg.event", timeout=30)  # the batch: 100 ms
        assert log.attributes == {"n": 1} and log.body == "hello"
    finally:
        provider.shutdown()


def test_wait_timeout_describes_what_was_received(otlp_grpc_receiver: OTLPGrpcReceiver) -> None:
    with exporters(otlp_grpc_receiver) as (_, log_exporter):
        log_exporter.export(make_telemetry().logs)
    start = time.monotonic()
    with pytest.raises(ReceiverTimeout) as excinfo:
        otlp_grpc_receiver.wait_for_logs(event_name="nope", timeout=0.3)
    assert 0.3 <= time.monotonic() - start < 2  # its 0.3 s, and at most about 7 times that
    message = str(excinfo.value)
    assert "expected >= 1 log(s)" in message and "got 0" in message
    assert "scheduled_event.transition" in message  # lists what did arrive
    with pytest.raises(AssertionError):
        otlp_grpc_receiver.wait_for_spans(name="nope", timeout=0.05)


def test_shared_store_across_transports() -> None:
    store = TelemetryStore()
    telemetry = make_telemetry()
    with OTLPHttpReceiver(store) as http_receiver, OTLPGrpcReceiver(store) as grpc_receiver:
        assert http_receiver.port != grpc_receiver.port
        for receiver in (http_receiver, grpc_receiver):
            with exporters(receiver) as (_, log_exporter):
                assert log_exporter.export(telemetry.logs) is LogRecordExportResult.SUCCESS
        logs = store.wait_for_logs(event_name="scheduled_event.transition", count=2, timeout=5)
        assert sorted(log.protocol for log in logs) == ["grpc", "http/protobuf"]
        assert http_receiver.accepted_requests == grpc_receiver.accepted_requests == 1
        assert store.count_requests(accepted=True) == 2
    assert not http_receiver.running and not grpc_receiver.running


# -- raw HTTP ---------------------------------------------------------------------------------------

_NO_PROXY_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def post(url: str, body: bytes, headers: dict[str, str], method: str = "POST") -> tuple[int, str, bytes]:
    request = urllib.request.Request(url, data=body if method == "POST" else None, headers=headers, method=method)
    try:
        with _NO_PROXY_OPENER.open(request, timeout=5) as response:
            return response.status, response.headers.get("Content-Type", ""), response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers.get("Content-Type", ""), error.read()


def test_http_json_encoding(otlp_http_receiver: OTLPHttpReceiver) -> None:
    trace_id, span_id = "5b8efff798038103d269b633813fc60c", "eee19b7ec3c1b174"
    logs_json = {
        "resourceLogs": [
            {
                "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "json-svc"}}]},
                "scopeLogs": [
                    {
                        "scope": {"name": "json.scope"},
                        "logRecords": [
                            {
                                "timeUnixNano": "1700000000000000000",
                                "severityNumber": 13,
                                "severityText": "WARN",
                                "eventName": "scheduled_event.transition",
                                "body": {"stringValue": "hi"},
                                "traceId": trace_id,
                                "spanId": span_id,
                                "unknownFutureField": 1,
                                "attributes": [
                                    {"key": "i", "value": {"intValue": "7"}},
                                    {"key": "b", "value": {"boolValue": True}},
                                    {"key": "d", "value": {"doubleValue": 1.5}},
                                    {
                                        "key": "a",
                                        "value": {"arrayValue": {"values": [{"stringValue": "x"}]}},
                                    },
                                ],
                            }
                        ],
                    }
                ],
            }
        ]
    }
    status, content_type, body = post(
        otlp_http_receiver.url("logs"), json.dumps(logs_json).encode(), {"Content-Type": "application/json"}
    )
    assert (status, content_type, json.loads(body)) == (200, "application/json", {})
    (log,) = otlp_http_receiver.logs
    assert log.protocol == "http/json"
    assert (log.trace_id, log.span_id) == (trace_id, span_id)
    assert log.attributes == {"i": 7, "b": True, "d": 1.5, "a": ["x"]}
    assert log.event_name == "scheduled_event.transition"
    assert (log.severity_number, log.resource, log.scope) == (13, {"service.name": "json-svc"}, "json.scope")


def test_http_rejects_bad_requests(otlp_http_receiver: OTLPHttpReceiver) -> None:
    proto = {"Content-Type": "application/x-protobuf"}
    base = otlp_http_receiver.endpoint
    assert post(f"{base}/v1/nope", b"", proto)[0] == 404
    assert post(f"{base}/v1/logs", b"x", {"Content-Type": "text/plain"})[0] == 415
    assert post(f"{base}/v1/logs", b"\xff\xff\xff", proto)[0] == 400
    assert post(f"{base}/v1/logs", gzip.compress(b"\xff\xff"), {**proto, "Content-Encoding": "gzip"})[0] == 400
    assert post(f"{base}/v1/logs", b"not gzip", {**proto, "Content-Encoding": "gzip"})[0] == 400
    assert post(f"{base}/v1/logs", b"", proto, method="GET")[0] == 405
    # An empty request is a valid (empty) ExportLogsServiceRequest.
    assert post(f"{base}/v1/logs", b"", proto)[:2] == (200, "application/x-protobuf")
    assert post(f"{base}/v1/metrics", b"", proto)[0] == 404, "the product sends no metrics, so none are taken"
    assert otlp_http_receiver.rejected_requests == 6
    assert otlp_http_receiver.accepted_requests == 1

    otlp_http_receiver.set_unavailable(True, retry_after=3)
    request = urllib.request.Request(f"{base}/v1/traces", data=b"", headers=proto, method="POST")
    with pytest.raises(urllib.error.HTTPError) as excinfo:
        _NO_PROXY_OPENER.open(request, timeout=5)
    assert excinfo.value.code == 503 and excinfo.value.headers["Retry-After"] == "3"
