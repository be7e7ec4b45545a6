"""OTEL_SDK_DISABLED, the none and console exporters, and bad configuration, as documented."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from se_exporter.simulator import EventPlan, SimWorld
from tests.otel.conftest import StartOTel
from tests.otlp import OTLPHttpReceiver
from tests.support.wait import wait_for

pytestmark = pytest.mark.posix

TRANSITION = "scheduled_event.transition"


def test_sdk_disabled_builds_no_pipeline_but_keeps_the_stderr_line(
    simulator: tuple[SimWorld, str], otlp_http_receiver: OTLPHttpReceiver, start_otel: StartOTel, tmp_path: Path
) -> None:
    world, url = simulator
    exporter = start_otel(url, otlp_http_receiver, "--log.format=json", env={"OTEL_SDK_DISABLED": "true"})
    exporter.wait_ready()
    world.add_event(EventPlan("Preempt", notice=30, resources=("other-vm",)))
    wait_for(lambda: TRANSITION in exporter.logs(), 15, "the transition line on stderr")
    assert "log_spool" not in exporter.metrics()
    assert exporter.stop() == 0  # a pipeline would flush now
    line = next(json.loads(text) for text in exporter.logs().splitlines() if TRANSITION in text)
    # Another VM's eviction is news for this one, not a warning (audit/records.py).
    assert line["level"] == "info" and line["event"] == TRANSITION and line["logger"] == "se_exporter.events"
    assert line["scheduled_event.resources"] == ["other-vm"] and line["scheduled_event.affects_this_vm"] is False
    assert line["scheduled_event.document_incarnation"] == 1 and line["msg"].startswith("Preempt scheduled")
    assert otlp_http_receiver.requests == [], "nothing may be sent"
    assert not (tmp_path / "state" / "state.db.spool").exists()


def test_logs_exporter_none_sends_spans_only(
    simulator: tuple[SimWorld, str], otlp_http_receiver: OTLPHttpReceiver, start_otel: StartOTel
) -> None:
    world, url = simulator
    exporter = start_otel(url, otlp_http_receiver, env={"OTEL_LOGS_EXPORTER": "none"})
    exporter.wait_ready()
    world.add_event(EventPlan("Reboot"))
    otlp_http_receiver.wait_for_spans(name="scheduled_events.poll", attributes={"scheduled_event.changed": True})
    assert "azure_scheduled_events_log_spool_depth" not in exporter.metrics()
    assert exporter.stop() == 0
    assert otlp_http_receiver.store.count_requests("logs") == 0


def test_console_exporters_print_instead_of_sending(
    simulator: tuple[SimWorld, str], otlp_http_receiver: OTLPHttpReceiver, start_otel: StartOTel
) -> None:
    world, url = simulator
    exporter = start_otel(
        url, otlp_http_receiver, env={"OTEL_LOGS_EXPORTER": "console", "OTEL_TRACES_EXPORTER": "console"}
    )
    exporter.wait_ready()
    world.add_event(EventPlan("Reboot"))
    wait_for(lambda: f'"event_name": "{TRANSITION}"' in exporter.logs(), 15, "the record printed on stdout")
    wait_for(lambda: '"name": "scheduled_events.poll"' in exporter.logs(), 15, "a span printed on stdout")
    assert exporter.stop() == 0
    assert otlp_http_receiver.requests == []


def test_unsupported_protocol_is_a_startup_error(simulator: tuple[SimWorld, str], start_otel: StartOTel) -> None:
    _, url = simulator
    exporter = start_otel(url, None, env={"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"})
    assert exporter.proc.wait(20) == 2
    assert "OTEL_EXPORTER_OTLP_PROTOCOL='http/json' is not supported" in exporter.logs()
