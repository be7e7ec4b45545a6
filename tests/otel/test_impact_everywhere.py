"""Impact and cause end to end: every built-in scenario of the simulator, seen on /metrics, in the OTLP
log records and on the lifecycle spans of a real receiver (the hook's environment: tests/approval)."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from se_exporter.simulator import SimWorld, builtin_names, builtin_scenario
from se_exporter.simulator.clock import ManualClock
from tests.otel.conftest import StartOTel
from tests.otlp import OTLPReceiver

TRANSITION = "scheduled_event.transition"
EXPECTED = {  # scenario -> (impact, cause)
    "cancelled-maintenance": ("reboot", "platform"),
    "freeze-live-migration": ("live_migration", "platform"),
    "hardware-failure": ("reboot", "failure"),  # first seen Started
    "host-maintenance-freeze": ("pause", "platform"),
    "platform-redeploy-failure": ("redeploy", "failure"),  # "has encountered a failure"
    "reschedule": ("reboot", "platform"),
    "spot-preempt": ("eviction", "platform"),
    "terminate": ("termination", "user"),
    "user-reboot": ("reboot", "user"),
    "user-reboot-auto-approved": ("reboot", "user"),  # first seen Started, yet a user's: never a failure
    "user-redeploy": ("redeploy", "user"),
}


def test_every_scenario_has_its_impact_and_cause_on_metrics_logs_and_spans(
    simulator: tuple[SimWorld, str], otlp_receiver: OTLPReceiver, start_otel: StartOTel
) -> None:
    world, url = simulator
    assert set(builtin_names()) == set(EXPECTED), "a new built-in scenario needs its expected impact here"
    scenario_of = {}
    for name in EXPECTED:
        (event_id,) = world.play(builtin_scenario(name)).values()
        scenario_of[event_id] = name
    exporter = start_otel(url, otlp_receiver)
    exporter.wait_ready()

    first = otlp_receiver.wait_for_logs(event_name=TRANSITION, count=len(EXPECTED), timeout=20)
    assert {
        log["scheduled_event.id"]: (log["scheduled_event.impact"], log["scheduled_event.cause"]) for log in first
    } == {event_id: EXPECTED[name] for event_id, name in scenario_of.items()}

    info = {
        sample.labels["event_id"]: (sample.labels["impact"], sample.labels["cause"])
        for family in text_string_to_metric_families(exporter.metrics())
        if family.name == "azure_scheduled_events_event_info"
        for sample in family.samples
    }
    assert info == {event_id: EXPECTED[name] for event_id, name in scenario_of.items()}

    clock = world.clock
    assert isinstance(clock, ManualClock), "the simulator fixture runs on a manual clock"
    clock.advance(5000)  # every scenario runs to its end: completed or cancelled
    spans = otlp_receiver.wait_for_spans(name="scheduled_event.lifecycle", count=len(EXPECTED), timeout=20)
    assert {
        span["scheduled_event.id"]: (span["scheduled_event.impact"], span["scheduled_event.cause"]) for span in spans
    } == {event_id: EXPECTED[name] for event_id, name in scenario_of.items()}
    logs = otlp_receiver.wait_for_logs(event_name=TRANSITION, count=len(EXPECTED) * 2, timeout=20)
    for log in logs:  # the cause of an event first seen Started stays "failure" on every later record
        assert (log["scheduled_event.impact"], log["scheduled_event.cause"]) == EXPECTED[
            scenario_of[str(log["scheduled_event.id"])]
        ]
    assert exporter.stop() == 0
