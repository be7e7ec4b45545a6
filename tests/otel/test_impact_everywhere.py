"""Impact and cause end to end: every built-in scenario of the simulator, seen on /metrics, in the OTLP
log records and on the lifecycle spans of a real receiver (the hook's environment: tests/approval)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from prometheus_client.parser import text_string_to_metric_families

from se_exporter.simulator import SimWorld, builtin_names, builtin_scenario
from se_exporter.simulator.clock import ManualClock
from tests.otel.conftest import StartOTel
from tests.otlp import OTLPReceiver
from tests.otlp.records import ReceivedLog, ReceivedSpan

pytestmark = pytest.mark.posix

TRANSITION = "scheduled_event.transition"
EXPECTED = {  # scenario -> (impact, cause), each scenario played while the exporter watches
    "cancelled-maintenance": ("reboot", "platform"),
    "freeze-live-migration": ("live_migration", "platform"),
    "freeze-no-impact": ("none", "platform"),  # DurationInSeconds 0: "won't interrupt the VM"
    "hardware-failure": ("reboot", "failure"),  # appeared Started: the documented hardware-failure path
    "host-maintenance-freeze": ("pause", "platform"),
    "platform-redeploy-failure": ("redeploy", "failure"),  # "has encountered a failure"
    "reschedule": ("reboot", "platform"),
    "spot-preempt": ("eviction", "platform"),
    "spot-eviction-risk": ("eviction_risk", "platform"),  # the notice; its Preempt below
    "spot-eviction-risk-passed": ("eviction_risk", "platform"),
    "terminate": ("termination", "user"),
    "user-reboot": ("reboot", "user"),
    "user-reboot-auto-approved": ("reboot", "user"),  # appeared Started, yet a user's: never a failure
    "user-redeploy": ("redeploy", "user"),
}
# A scenario's events that appear later (not listed at once): the Preempt that follows the eviction-risk notice.
LATER = {("spot-eviction-risk", "preempt"): ("eviction", "platform")}
FOUND_AT_START = ("reboot", "platform")  # hardware-failure already Started at the first look: not seen appearing


def causes(items: Sequence[ReceivedLog | ReceivedSpan]) -> dict[str, tuple[object, object]]:
    return {
        str(item["scheduled_event.id"]): (item["scheduled_event.impact"], item["scheduled_event.cause"])
        for item in items
    }


def test_every_scenario_has_its_impact_and_cause_on_metrics_logs_and_spans(
    simulator: tuple[SimWorld, str], otlp_receiver: OTLPReceiver, start_otel: StartOTel
) -> None:
    world, url = simulator
    assert set(builtin_names()) == set(EXPECTED), "a new built-in scenario needs its expected impact here"
    (found,) = world.play(builtin_scenario("hardware-failure")).values()
    exporter = start_otel(url, otlp_receiver)
    exporter.wait_ready()
    assert causes(otlp_receiver.wait_for_logs(event_name=TRANSITION, count=1, timeout=20)) == {found: FOUND_AT_START}
    expected, later = {found: FOUND_AT_START}, {}
    for name, classification in EXPECTED.items():
        for alias, event_id in world.play(builtin_scenario(name)).items():
            if (name, alias) in LATER:
                later[event_id] = LATER[name, alias]
            else:
                expected[event_id] = classification

    assert causes(otlp_receiver.wait_for_logs(event_name=TRANSITION, count=len(expected), timeout=20)) == expected
    info = {
        sample.labels["event_id"]: (sample.labels["impact"], sample.labels["cause"])
        for family in text_string_to_metric_families(exporter.metrics())
        if family.name == "azure_scheduled_events_event_info"
        for sample in family.samples
    }
    assert info == expected

    clock = world.clock
    assert isinstance(clock, ManualClock), "the simulator fixture runs on a manual clock"
    clock.advance(125)  # the Preempt after the eviction-risk notice is listed (for 55 s)
    expected |= later
    (preempt,) = later
    otlp_receiver.wait_for_logs(event_name=TRANSITION, attributes={"scheduled_event.id": preempt}, timeout=20)
    clock.advance(2 * 86400 + 5000)  # every scenario runs to its end (a degraded host's Redeploy: 2 days)
    spans = otlp_receiver.wait_for_spans(name="scheduled_event.lifecycle", count=len(expected), timeout=20)
    assert causes(spans) == expected
    logs = otlp_receiver.wait_for_logs(event_name=TRANSITION, count=len(expected) * 2, timeout=20)
    for log in logs:  # an event's cause stays what it was at its first sighting on every later record
        event_id = str(log["scheduled_event.id"])
        assert causes([log]) == {event_id: expected[event_id]}
    assert exporter.stop() == 0
