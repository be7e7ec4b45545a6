"""Quiet defaults: nothing is exported, retried or complained about unless OTLP is configured, and a
dead collector is one warning with a growing pause, not an error line every few seconds."""

from __future__ import annotations

import time

import pytest

from se_exporter.otel.config import HOW_TO_ENABLE
from se_exporter.simulator import EventPlan, SimWorld
from tests.otel.conftest import StartOTel
from tests.otlp import OTLPReceiver
from tests.support.exposition import value
from tests.support.wait import wait_for

pytestmark = [pytest.mark.posix, pytest.mark.full]

REQUESTS = "azure_scheduled_events_imds_requests_total"
WINDOW = 10.0  # seconds watched: the old default logged its first export error within 5-12 s


def polls(exporter_metrics: str) -> float:
    return value(exporter_metrics, REQUESTS, method="GET", code="200") or 0


def test_without_otel_variables_nothing_is_exported_and_sigterm_is_immediate(
    simulator: tuple[SimWorld, str], start_exporter: StartOTel
) -> None:
    world, url = simulator
    exporter = start_exporter(f"--imds.url={url}", "--poll.interval=250ms")
    exporter.wait_ready()
    world.add_event(EventPlan("Reboot", notice=900))
    began = time.monotonic()
    wait_for(
        lambda: time.monotonic() - began >= WINDOW and polls(exporter.metrics()) >= 20,
        WINDOW + 10,
        f"{WINDOW:g} s of polling",
    )
    stopping = time.monotonic()
    assert exporter.stop() == 0
    # Nothing to ship: no flush waits (a flush that did would give up only after 5 s).
    assert time.monotonic() - stopping < 4, "nothing to ship: SIGTERM exits at once"
    logs = exporter.logs()
    assert logs.count(HOW_TO_ENABLE) == 1, logs
    assert "level=error" not in logs and "Traceback" not in logs, logs
    others = [line for line in logs.splitlines() if HOW_TO_ENABLE not in line]
    assert not [line for line in others if "OTLP" in line or "logger=opentelemetry" in line], "no export attempted"


def test_a_dead_collector_is_one_warning_per_signal_and_a_growing_pause(
    simulator: tuple[SimWorld, str], otlp_receiver: OTLPReceiver, start_otel: StartOTel
) -> None:
    world, url = simulator
    otlp_receiver.set_unavailable()  # answers 503 to everything: each attempt is counted
    exporter = start_otel(url, otlp_receiver, state=False)  # span batches every 200 ms
    exporter.wait_ready()
    world.add_event(EventPlan("Reboot", notice=900))
    began = time.monotonic()
    wait_for(lambda: time.monotonic() - began >= WINDOW, WINDOW + 5, f"{WINDOW:g} s of outage")
    logs = exporter.logs()
    assert "level=error" not in logs, logs
    assert logs.count("OTLP log export failing") == 1 and logs.count("OTLP span export failing") == 1, logs
    # Without the pause: a span batch every 200 ms, 50 attempts in 10 s. With it: 1, 2, 4, 8 s apart.
    assert 1 <= otlp_receiver.store.count_requests("traces", accepted=False) <= 10
    assert 1 <= otlp_receiver.store.count_requests("logs", accepted=False) <= 10
    otlp_receiver.set_unavailable(False)
    exporter.stop()


def test_sigterm_with_everything_delivered_is_immediate(
    simulator: tuple[SimWorld, str], otlp_receiver: OTLPReceiver, start_otel: StartOTel
) -> None:
    world, url = simulator
    exporter = start_otel(url, otlp_receiver, state=False)
    exporter.wait_ready()
    world.add_event(EventPlan("Freeze", notice=900))
    otlp_receiver.wait_for_logs(event_name="scheduled_event.transition", timeout=15)
    wait_for(lambda: value(exporter.metrics(), "azure_scheduled_events_log_spool_depth") == 0, 15, "delivered")
    stopping = time.monotonic()
    assert exporter.stop() == 0
    assert time.monotonic() - stopping < 4, "everything delivered: nothing waits for the 5 s flush give-up"
