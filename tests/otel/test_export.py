"""The exporter, as a subprocess against the IMDS simulator, seen by a real OTLP receiver (HTTP and gRPC):
log records, spans and the resource, decoded from the wire."""

from __future__ import annotations

import re
import time

import pytest

from se_exporter.simulator import EventPlan, SimWorld
from tests.otel.conftest import StartOTel
from tests.otlp import OTLPReceiver, ReceivedLog
from tests.support.wait import wait_for

pytestmark = [pytest.mark.posix, pytest.mark.full]

TRANSITION = "scheduled_event.transition"


def by_kind(logs: list[ReceivedLog], event_id: str) -> dict[str, ReceivedLog]:
    return {str(log[TRANSITION]): log for log in logs if log["scheduled_event.id"] == event_id}


def test_transitions_spans_and_resource(
    simulator: tuple[SimWorld, str], otlp_receiver: OTLPReceiver, start_otel: StartOTel
) -> None:
    world, url = simulator
    exporter = start_otel(
        url,
        otlp_receiver,
        env={
            "OTEL_SERVICE_NAME": "se-test",
            "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment.name=ci,service.name=x",
        },
    )
    exporter.wait_ready()
    reboot = world.add_event(EventPlan("Reboot", event_source="User", notice=900, description="by the user"))
    freeze = world.add_event(EventPlan("Freeze", notice=600, duration=5, resources=("other-vm", "sim-vm-0")))
    otlp_receiver.wait_for_logs(event_name=TRANSITION, count=2, timeout=15)
    world.start_event(reboot)
    world.reschedule(freeze, 1200)
    otlp_receiver.wait_for_logs(event_name=TRANSITION, count=4, timeout=15)
    world.cancel_event(freeze)
    world.complete_event(reboot)
    logs = otlp_receiver.wait_for_logs(event_name=TRANSITION, count=6, timeout=15)

    assert len(logs) == 6 and len({log["log.record.uid"] for log in logs}) == 6
    r, f = by_kind(logs, reboot), by_kind(logs, freeze)
    assert list(r) == ["scheduled", "started", "completed"] and list(f) == ["scheduled", "rescheduled", "cancelled"]
    first = r["scheduled"]
    assert first.attributes["scheduled_event.resources"] == ["sim-vm-0"]
    assert first["scheduled_event.affects_this_vm"] is True
    assert f["scheduled"]["scheduled_event.affects_this_vm"] is True
    assert type(first["scheduled_event.document_incarnation"]) is int
    assert first["scheduled_event.duration_s"] == -1 and f["scheduled"]["scheduled_event.duration_s"] == 5
    assert first["scheduled_event.source"] == "User" and first["scheduled_event.description"] == "by the user"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", str(first["scheduled_event.not_before"]))
    assert f["rescheduled"]["scheduled_event.not_before"] != f["scheduled"]["scheduled_event.not_before"]
    assert "scheduled_event.not_before" not in r["started"].attributes
    assert r["started"]["scheduled_event.previous_status"] == "Scheduled"
    assert isinstance(r["completed"]["scheduled_event.started_s"], float)
    assert [(log.severity_text, log.severity_number) for log in r.values()] == [("WARN", 13), ("WARN", 13), ("INFO", 9)]
    assert {log.severity_text for log in f.values()} == {"INFO"}
    assert all(log.time_unix_nano == log.observed_time_unix_nano > 0 for log in logs)
    assert "Reboot started" in str(r["started"].body)

    resource = first.resource
    assert resource["service.name"] == "se-test" and resource["deployment.environment.name"] == "ci"
    assert resource["cloud.provider"] == "azure" and resource["cloud.platform"] == "azure.vm"
    assert resource["cloud.region"] == world.vm.location and resource["host.name"] == "sim-vm-0"
    assert resource["host.id"] == world.vm.vm_id and resource["host.type"] == world.vm.vm_size
    assert resource["cloud.account.id"] == world.vm.subscription_id and str(resource["cloud.resource_id"])
    assert resource["service.version"]

    lifecycles = otlp_receiver.wait_for_spans(name="scheduled_event.lifecycle", count=2, timeout=15)
    span = next(s for s in lifecycles if s["scheduled_event.id"] == reboot)
    assert span.start_time_unix_nano == first.time_unix_nano, "the span starts at the first sighting"
    assert span.end_time_unix_nano == r["completed"].time_unix_nano and span.parent_span_id == ""
    assert [(e.name, e.time_unix_nano) for e in span.events] == [(k, log.time_unix_nano) for k, log in r.items()]
    assert span["scheduled_event.outcome"] == "completed" and span["scheduled_event.type"] == "Reboot"
    assert span.resource == resource
    cancelled = next(s for s in lifecycles if s["scheduled_event.id"] == freeze)
    assert cancelled["scheduled_event.outcome"] == "cancelled" and len(cancelled.events) == 3

    polls = otlp_receiver.wait_for_spans(name="scheduled_events.poll", attributes={"scheduled_event.changed": True})
    poll = polls[0]
    assert type(poll["scheduled_event.document_incarnation"]) is int and type(poll["scheduled_event.count"]) is int
    http = otlp_receiver.wait_for_spans(lambda s: s.parent_span_id == poll.span_id)[0]
    assert http.trace_id == poll.trace_id and http.kind_name == "SPAN_KIND_CLIENT" and http.name == "GET"
    assert http["http.request.method"] == "GET" and http["http.response.status_code"] == 200
    assert str(http["url.full"]).startswith(url + "/metadata/scheduledevents?api-version=")
    assert http["server.address"] == "127.0.0.1" and type(http["server.port"]) is int

    assert exporter.stop() == 0
    lines = [line for line in exporter.logs().splitlines() if "event=scheduled_event.transition" in line]
    assert len(lines) == 6, "each record is also one structured stderr line"
    assert "scheduled_event.transition=scheduled" in lines[0] and "level=warn" in lines[0]
    assert "affects_this_vm" not in lines[0] and len(lines[0]) < 320, lines[0]  # 770 with every field


def test_collector_unreachable_from_the_start_does_not_stop_monitoring(
    simulator: tuple[SimWorld, str], start_otel: StartOTel
) -> None:
    world, url = simulator
    exporter = start_otel(url, None, env={"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}, state=False)
    exporter.wait_ready()
    world.add_event(EventPlan("Reboot"))
    wait_for(lambda: "azure_scheduled_events_log_spool_depth 1.0" in exporter.metrics(), 15, "record spooled")
    wait_for(lambda: "OTLP log export failing" in exporter.logs(), 15, "outage reported")
    assert exporter.stop() == 0
    assert "lost: no --state.file" in exporter.logs()


def test_sigterm_flushes_within_a_bounded_time(
    simulator: tuple[SimWorld, str], otlp_receiver: OTLPReceiver, start_otel: StartOTel
) -> None:
    world, url = simulator
    # Spans would wait a minute for their batch, and without --state.file the spool is in memory:
    # only the shutdown flush can deliver them.
    exporter = start_otel(url, otlp_receiver, env={"OTEL_BSP_SCHEDULE_DELAY": "60000"}, state=False)
    exporter.wait_ready()
    world.add_event(EventPlan("Terminate", notice=300))
    wait_for(lambda: TRANSITION in exporter.logs(), 15, "transition observed")
    began = time.monotonic()
    assert exporter.stop() == 0
    assert time.monotonic() - began < 30, "the shutdown flush sent them, not the batch's 60 s delay"
    log = otlp_receiver.wait_for_logs(event_name=TRANSITION, timeout=1)[0]
    assert log["scheduled_event.type"] == "Terminate" and log.severity_text == "WARN"
    otlp_receiver.wait_for_spans(name="scheduled_events.poll", attributes={"scheduled_event.changed": True}, timeout=1)
