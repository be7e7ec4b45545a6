"""Batches bounded in bytes, and a record no collector takes set aside: never a stuck queue (issue 17,
point 5). Against the real gRPC receiver, whose request limit is gRPC's default 4 MiB."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from se_exporter.audit.records import AuditRecord
from tests.otel.conftest import build_in_process
from tests.otlp import Failure, OTLPGrpcReceiver, OTLPHttpReceiver
from tests.support.exporter_process import ExporterProcess
from tests.support.fake_imds import Answer, FakeIMDS
from tests.support.wait import wait_for

pytestmark = [pytest.mark.posix, pytest.mark.full]

TRANSITION = "scheduled_event.transition"


def freeze(event_id: str, description: str) -> dict[str, object]:
    return {
        "EventId": event_id,
        "EventType": "Freeze",
        "ResourceType": "VirtualMachine",
        "Resources": ["vm-a"],
        "EventStatus": "Scheduled",
        "NotBefore": "Mon, 11 Apr 2099 22:26:58 GMT",
        "Description": description,
        "EventSource": "Platform",
        "DurationInSeconds": 5,
    }


def test_records_with_huge_descriptions_arrive_after_an_outage(
    fake_imds: FakeIMDS, start_exporter: object, otlp_grpc_receiver: OTLPGrpcReceiver, tmp_path: Path
) -> None:
    """Six 1.9 MB records once made one 11 MB request, refused for ever; nothing arrived for minutes. Six
    1.2 MB records (7.2 MB: what the spool's 8 MiB holds) are six requests now, each over the 1 MiB batch
    bound alone."""
    big = "x" * 1_200_000
    documents = [
        {"DocumentIncarnation": 1, "Events": [freeze("A", big + "a"), freeze("B", big + "b")]},
        {"DocumentIncarnation": 2, "Events": [freeze("C", big + "c"), freeze("D", big + "d")]},
    ]
    current = [Answer(body=json.dumps(documents[0]).encode())]
    fake_imds.respond = lambda seen: current[0]
    otlp_grpc_receiver.set_failure(Failure())  # the collector is down while six records pile up
    exporter: ExporterProcess = start_exporter(  # type: ignore[operator]
        f"--imds.url={fake_imds.url}",
        "--poll.interval=250ms",
        "--vm.name=vm-a",
        f"--state.file={tmp_path / 'state.db'}",
        env={**otlp_grpc_receiver.env, "OTEL_SDK_DISABLED": "false"},
    )
    wait_for(lambda: "azure_scheduled_events_log_spool_depth 2.0" in exporter.metrics(), 20, "the first document")
    current[0] = Answer(body=json.dumps(documents[1]).encode())
    wait_for(lambda: "azure_scheduled_events_log_spool_depth 6.0" in exporter.metrics(), 30, "six records waiting")
    otlp_grpc_receiver.set_failure(None)
    began = time.monotonic()
    logs = otlp_grpc_receiver.wait_for_logs(event_name=TRANSITION, count=6, timeout=60)
    assert {(log["scheduled_event.id"], log["scheduled_event.transition"]) for log in logs} == {
        ("A", "scheduled"),
        ("B", "scheduled"),
        ("A", "cancelled"),
        ("B", "cancelled"),
        ("C", "scheduled"),
        ("D", "scheduled"),
    }
    assert time.monotonic() - began < 60
    assert exporter.stop() == 0


def test_a_record_the_collector_never_takes_is_set_aside_and_the_rest_goes_on(
    otlp_grpc_receiver: OTLPGrpcReceiver, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    environ = {**otlp_grpc_receiver.env, "OTEL_TRACES_EXPORTER": "none"}
    telemetry = build_in_process(monkeypatch, environ, tmp_path / "spool")
    assert telemetry.spool is not None
    try:
        huge = AuditRecord("scheduled_event.approval", "INFO", "y" * (5 << 20), {}, 1, "uid-huge")  # over 4 MiB
        small = AuditRecord("scheduled_event.approval", "INFO", "after the huge one", {}, 2, "uid-small")
        telemetry.append([huge, small])
        otlp_grpc_receiver.wait_for_logs(lambda r: r.body == "after the huge one", timeout=60)
        wait_for(lambda: telemetry.spool is not None and telemetry.spool.depth == 0, 10, "an empty spool")
        assert telemetry.spool.dropped == 1
    finally:
        telemetry.close(timeout=2)
    assert not [log for log in otlp_grpc_receiver.logs if str(log.body).startswith("yyy")]


def test_a_collector_coming_back_between_two_attempts_does_not_make_a_record_undeliverable(
    otlp_http_receiver: OTLPHttpReceiver, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The soak once lost a record this way: it failed alone, the collector came back, the next record
    went through, and the first was set aside although nothing was wrong with it. And the order holds:
    the probe that tells an outage from a bad record carries no record (probing with the next record
    once delivered it before the first)."""
    otlp_http_receiver.set_failure(Failure(http_status=503, remaining=2))  # the batch, then the first alone
    environ = {**otlp_http_receiver.env, "OTEL_TRACES_EXPORTER": "none"}
    telemetry = build_in_process(monkeypatch, environ, tmp_path / "spool")
    assert telemetry.spool is not None
    try:
        telemetry.append(
            [AuditRecord("scheduled_event.approval", "INFO", f"record {n}", {}, n, f"uid-{n}") for n in (1, 2)]
        )
        otlp_http_receiver.wait_for_logs(count=2, timeout=30)
        wait_for(lambda: telemetry.spool is not None and telemetry.spool.depth == 0, 10, "an empty spool")
        assert telemetry.spool.dropped == 0
    finally:
        telemetry.close(timeout=2)
    assert [str(log.body) for log in otlp_http_receiver.logs] == ["record 1", "record 2"]


@pytest.mark.parametrize(
    ("refusals", "batches"),
    [
        pytest.param(0, [32, 64, 128, 76], id="a collector that takes them: doubled up to the full batch"),
        pytest.param(1, [16, 32, 64, 128, 60], id="the first refused: halved, then doubled"),
    ],
)
def test_a_backlog_is_sent_in_batches_that_start_small_and_double_while_the_collector_takes_them(
    otlp_http_receiver: OTLPHttpReceiver,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    refusals: int,
    batches: list[int],
) -> None:
    """A collector away at a start with a backlog was sent a full batch (512 records converted by the SDK
    and protobuf, about 1.8 MiB of peak memory) only to refuse it; the first batch is 32 records now."""
    if refusals:
        otlp_http_receiver.set_failure(Failure(http_status=400, remaining=refusals))  # not retried by the SDK
    environ = {**otlp_http_receiver.env, "OTEL_TRACES_EXPORTER": "none"}
    telemetry = build_in_process(monkeypatch, environ, tmp_path / "spool")
    assert telemetry.spool is not None
    try:
        telemetry.append(
            [AuditRecord("scheduled_event.approval", "INFO", f"record {n}", {}, n, f"uid-{n}") for n in range(300)]
        )
        otlp_http_receiver.wait_for_logs(count=300, timeout=60)
    finally:
        telemetry.close(timeout=2)
    store = otlp_http_receiver.store
    assert store.count_requests("logs", accepted=False) == refusals
    assert [request.items for request in store.find_requests(signal="logs", accepted=True)] == batches
    assert [str(log.body) for log in otlp_http_receiver.logs] == [f"record {n}" for n in range(300)]
