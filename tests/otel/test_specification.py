"""OTLP as the specification says (issue 22, point 12), against the real receivers over loopback, both
protocols: a partial success is counted and said, a refusal not to be retried is never sent again (a
record refused for good is set aside; a collector refusing everything keeps the records waiting, said
once), Retry-After is honoured, and every warning names the reason."""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from opentelemetry import trace

from se_exporter.audit.records import AuditRecord
from se_exporter.durable.opening import open_memory_database
from se_exporter.errors import ConfigError
from se_exporter.otel.config import parse_otel_environment
from se_exporter.otel.pipeline import build_telemetry
from tests.otel.conftest import InProcess, build_in_process
from tests.otlp import Failure, OTLPReceiver
from tests.support.wait import wait_for

pytestmark = pytest.mark.full


def records(*numbers: int) -> list[AuditRecord]:
    return [AuditRecord("scheduled_event.approval", "INFO", f"record {n}", {}, n, f"uid-{n}") for n in numbers]


@pytest.fixture
def pipeline(otlp_receiver: OTLPReceiver, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[InProcess]:
    environ = {**otlp_receiver.env, "OTEL_BSP_SCHEDULE_DELAY": "50"}
    telemetry = build_in_process(monkeypatch, environ, tmp_path / "spool")
    yield telemetry
    telemetry.close(timeout=2)


def test_a_partial_success_is_counted_as_dropped_and_said_with_the_collectors_message(
    otlp_receiver: OTLPReceiver, pipeline: InProcess, caplog: pytest.LogCaptureFixture
) -> None:
    """A partial success rejecting every record once counted as delivered, silently."""
    otlp_receiver.set_partial_success("attribute value too long")
    spool = pipeline.spool
    assert spool is not None
    pipeline.append(records(1, 2, 3))
    said = "rejected 3 (the collector rejected 3 of them: attribute value too long); counted as dropped"
    # The line is written after the count changes, on the shipper's thread: wait for both.
    wait_for(lambda: spool.depth == 0 and spool.dropped == 3 and said in caplog.text, 20, "three rejected, said")
    assert otlp_receiver.store.count_requests("logs", accepted=True) == 1, "a partial success is not retried"


def test_a_record_refused_for_good_is_set_aside_at_once_and_never_sent_again(
    otlp_receiver: OTLPReceiver, pipeline: InProcess, caplog: pytest.LogCaptureFixture
) -> None:
    otlp_receiver.set_failure(
        Failure(http_status=400, grpc_code=grpc.StatusCode.INVALID_ARGUMENT, remaining=1, message="malformed record")
    )
    spool = pipeline.spool
    assert spool is not None
    pipeline.append(records(1))
    # The line is written after the record leaves the spool, on the shipper's thread: wait for both
    # (under Wine the test once read the log between the two).
    wait_for(lambda: spool.depth == 0 and "set aside as undeliverable" in caplog.text, 20, "the record set aside")
    assert spool.dropped == 1 and otlp_receiver.store.count_requests("logs", accepted=False) == 1
    assert "malformed record" in caplog.text
    pipeline.append(records(2))
    otlp_receiver.wait_for_logs(lambda log: log.body == "record 2", timeout=20)
    assert [str(log.body) for log in otlp_receiver.logs] == ["record 2"], "the refused one was not sent again"


def test_a_collector_refusing_everything_for_good_keeps_the_records_and_says_so_once(
    otlp_receiver: OTLPReceiver, pipeline: InProcess, caplog: pytest.LogCaptureFixture
) -> None:
    """401 (or 403, 404): the configuration, not the records. The request is not repeated every second."""
    otlp_receiver.set_failure(
        Failure(http_status=401, grpc_code=grpc.StatusCode.UNAUTHENTICATED, message="missing token")
    )
    spool = pipeline.spool
    assert spool is not None
    pipeline.append(records(1, 2, 3))
    wait_for(lambda: "refused, not retried until the configuration changes" in caplog.text, 20, "the error line")
    sent = otlp_receiver.store.count_requests("logs")
    time.sleep(2)  # nothing more may come for two minutes
    assert otlp_receiver.store.count_requests("logs") == sent <= 4  # halved once, alone, and an empty request
    assert spool.depth == 3 and spool.dropped == 0
    assert caplog.text.count("refused, not retried until the configuration changes") == 1
    assert "missing token" in caplog.text


def test_retry_after_is_honoured(otlp_receiver: OTLPReceiver, pipeline: InProcess) -> None:
    otlp_receiver.set_failure(Failure(retry_after=3.0, remaining=1))
    spool = pipeline.spool
    assert spool is not None
    pipeline.append(records(1))
    wait_for(lambda: otlp_receiver.store.count_requests("logs", accepted=False) == 1, 20, "the refusal")
    refused_at = time.monotonic()
    otlp_receiver.wait_for_logs(timeout=20)
    assert time.monotonic() - refused_at >= 2.8, "tried again before the collector said it would be ready"


def test_a_retry_after_beyond_five_minutes_is_waited_five_minutes_and_said(
    otlp_receiver: OTLPReceiver, pipeline: InProcess, caplog: pytest.LogCaptureFixture
) -> None:
    """``Retry-After: 3600`` was waited 300 s while the docs said "never sooner than it asks": both now say
    the same (``otel/answers.py`` says why)."""
    otlp_receiver.set_failure(Failure(retry_after=3600.0, remaining=1))
    spool = pipeline.spool
    assert spool is not None
    pipeline.append(records(1))
    wait_for(lambda: "OTLP log export failing" in caplog.text, 20, "the outage said")
    assert "it asked to wait 3600 s: asked again after 300 s" in caplog.text
    assert spool.depth == 1


def test_spans_refused_for_good_are_dropped_not_sent_again(
    otlp_receiver: OTLPReceiver, pipeline: InProcess, caplog: pytest.LogCaptureFixture
) -> None:
    """Held spans answered 400 were sent again and again, each time with more (294 bytes grew to 1,894)."""
    caplog.set_level(logging.INFO, logger="se_exporter")
    assert pipeline.tracer_provider is not None
    tracer = pipeline.tracer_provider.get_tracer("test")
    otlp_receiver.set_failure(Failure(http_status=400, grpc_code=grpc.StatusCode.INVALID_ARGUMENT, remaining=1))
    with tracer.start_as_current_span("refused"):
        pass
    wait_for(lambda: otlp_receiver.store.count_requests("traces", accepted=False) == 1, 20, "the refusal")
    with tracer.start_as_current_span("after"):
        pass
    otlp_receiver.wait_for_spans(timeout=20)
    assert [span.name for span in otlp_receiver.spans] == ["after"]
    assert "1 of 1 spans dropped, not retried" in caplog.text
    assert isinstance(pipeline.tracer_provider, trace.TracerProvider)


def test_grpc_without_its_extra_is_a_configuration_error_that_says_how_to_get_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "grpc", None)  # as on a VM that installed the package without [grpc]
    config = parse_otel_environment(
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}
    )
    with pytest.raises(ConfigError, match=r"pip install 'azure-scheduled-events-exporter\[grpc\]'"):
        build_telemetry(config, {}, open_memory_database(), "test")


def test_while_export_fails_each_attempt_is_an_empty_request_first(
    otlp_receiver: OTLPReceiver, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An outage costs one small request per attempt, never the conversion of a batch: once an attempt was
    refused, every later one asks with an empty request first, and the records go only once one is taken."""
    environ = {**otlp_receiver.env, "OTEL_EXPORTER_OTLP_TIMEOUT": "500"}  # the SDK's own retries end soon
    pipeline = build_in_process(monkeypatch, environ, tmp_path / "spool")
    try:
        otlp_receiver.set_failure(Failure())
        pipeline.append(records(1, 2, 3))
        wait_for(lambda: otlp_receiver.store.count_requests("logs", accepted=False) >= 4, 30, "four refusals")
        otlp_receiver.set_failure(None)
        otlp_receiver.wait_for_logs(count=3, timeout=30)
    finally:
        pipeline.close(timeout=2)
    logs = [request for request in otlp_receiver.store.requests if request.signal == "logs"]
    refused = [request.items for request in logs if not request.accepted]
    assert refused[0] == 3, refused  # the first attempt carried the records (and so may the SDK's retries of it)
    first_empty = refused.index(0)
    assert set(refused[:first_empty]) == {3} and not any(refused[first_empty:]), (
        f"records converted and sent again during the outage: {refused}"
    )
    taken = [request.items for request in logs if request.accepted]
    assert taken[0] == 0 and sum(taken) == 3, taken  # the empty request taken, then the records
