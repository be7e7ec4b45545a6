"""SimWorld's Python API: manual scripting, incarnation rules, ground truth."""

from __future__ import annotations

import random
import threading

import pytest

from se_exporter.simulator import EventPlan, ManualClock, Scenario, ScenarioError, ScenarioEvent, SimWorld
from se_exporter.simulator.model import SELF
from tests.simulator.conftest import START

pytestmark = pytest.mark.pure

REBOOT = EventPlan("Reboot", notice=600, started_for=60)


def statuses(world: SimWorld) -> list[str]:
    return [e.status for e in world.snapshot().events]


@pytest.mark.parametrize(
    ("operation", "expected_kind", "expected_reason", "left"),
    [
        ("start_event", "started", "manual", ["Started"]),
        ("cancel_event", "removed", "cancelled", []),
    ],
)
def test_manual_operations_on_a_scheduled_event(
    world: SimWorld, operation: str, expected_kind: str, expected_reason: str, left: list[str]
) -> None:
    event_id = world.add_event(REBOOT)
    assert getattr(world, operation)(event_id) is True
    assert statuses(world) == left
    last = world.truth.changes()[-1]
    assert (last.kind, last.reason, last.event_id) == (expected_kind, expected_reason, event_id)
    assert getattr(world, operation)(event_id) is False  # no longer Scheduled


def test_complete_only_applies_to_started_events(world: SimWorld) -> None:
    event_id = world.add_event(REBOOT)
    assert world.complete_event(event_id) is False
    world.start_event(event_id)
    assert world.complete_event(event_id) is True
    assert world.snapshot().events == ()
    assert world.truth.changes()[-1].previous_status == "Started"


def test_reschedule_moves_not_before_and_the_automatic_start(clock: ManualClock, world: SimWorld) -> None:
    event_id = world.add_event(REBOOT)
    clock.advance(100)
    assert world.reschedule(event_id, notice=1000) is True
    assert world.snapshot().events[0].not_before == START + 1100
    clock.advance(500)  # the old NotBefore (600) passes: nothing happens
    assert statuses(world) == ["Scheduled"]
    clock.advance(500)
    assert statuses(world) == ["Started"]
    assert world.reschedule(event_id, notice=10) is False


def test_resources_resolve_self_and_keep_order(world: SimWorld) -> None:
    world.add_event(EventPlan("Freeze", resources=("vm-peer-0", SELF, "vm-peer-2")))
    assert world.snapshot().events[0].resources == ("vm-peer-0", "sim-vm-0", "vm-peer-2")


def test_incarnation_counts_batches(clock: ManualClock, world: SimWorld) -> None:
    first = world.add_event(REBOOT)
    second = world.add_event(REBOOT)
    assert world.snapshot().incarnation == 2  # two API calls, two document versions
    clock.advance(600)  # both start at the same instant: one new document
    assert world.snapshot().incarnation == 3
    world.approve([first, second])  # already started: no change
    assert world.snapshot().incarnation == 3


def test_snapshot_is_a_copy(world: SimWorld) -> None:
    world.add_event(REBOOT)
    snapshot = world.snapshot()
    snapshot.events[0].status = "Tampered"
    assert statuses(world) == ["Scheduled"]


def test_manual_incarnation_reset(world: SimWorld) -> None:
    world.add_event(REBOOT)
    world.reset_incarnation(0)
    assert world.snapshot().incarnation == 0
    assert world.truth.changes()[-1].kind == "incarnation_reset"


def test_guids_are_reproducible_with_a_seed(clock: ManualClock) -> None:
    ids = [SimWorld(clock=clock, rng=random.Random(5)).add_event(REBOOT) for _ in range(2)]
    assert ids[0] == ids[1]


def test_invalid_scenario_is_refused_by_play(world: SimWorld) -> None:
    bad = Scenario("bad", (ScenarioEvent("e", EventPlan("Reboot", notice=10), cancel_at=20),))
    with pytest.raises(ScenarioError, match=r"events\[0\]\.cancel_at"):
        world.play(bad)
    with pytest.raises(ValueError, match="at least one"):
        world.loop([])


def test_truth_records_times(clock: ManualClock, world: SimWorld) -> None:
    clock.advance(10)
    world.add_event(REBOOT)
    world.record_request("GET", "/x", 200, None)
    (change,) = world.truth.changes()
    (request,) = world.truth.requests()
    assert (change.sim_time, change.real_time, change.real_monotonic) == (START + 10, START + 10, 10)
    assert change.not_before == "Fri, 15 Apr 2022 05:30:10 GMT"
    assert change.not_before_sim == START + 610
    assert (request.method, request.path, request.status, request.sim_time) == ("GET", "/x", 200, START + 10)
    assert change.seq < request.seq


def test_truth_wait_for_wakes_up_on_new_records(world: SimWorld) -> None:
    thread = threading.Timer(0.05, lambda: world.add_event(REBOOT))
    thread.start()
    assert world.truth.wait_for(lambda t: len(t.changes()) == 1, timeout=5)
    assert not world.truth.wait_for(lambda t: len(t.changes()) == 2, timeout=0.05)
    thread.join()


def test_concurrent_approvals_and_ticks_keep_the_lifecycle_consistent(clock: ManualClock, world: SimWorld) -> None:
    ids = [world.add_event(EventPlan("Freeze", notice=5, started_for=3)) for _ in range(50)]

    def approver() -> None:
        world.approve(ids)

    def ticker() -> None:
        for _ in range(20):
            clock.advance(0.5)
            world.tick()

    threads = [threading.Thread(target=approver) for _ in range(4)] + [threading.Thread(target=ticker)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    clock.advance(10)
    world.tick()
    per_event: dict[str, list[str]] = {}
    for change in world.truth.changes():
        per_event.setdefault(change.event_id or "", []).append(change.kind)
    assert all(kinds == ["appeared", "started", "removed"] for kinds in per_event.values())
    assert len(per_event) == 50
