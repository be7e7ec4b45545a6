"""Scenario YAML: the documented format, and clear errors naming the key."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from se_exporter.simulator import (
    ManualClock,
    ScenarioError,
    SimWorld,
    builtin_names,
    builtin_scenario,
    load_scenario_file,
    parse_scenario,
    resolve_scenario,
)
from tests.simulator.conftest import START, get_document

pytestmark = pytest.mark.pure

TESTDATA = Path(__file__).parent.parent / "testdata" / "sim"
MINIMAL = "events:\n  - {id: e, type: Reboot}\n"


def test_full_format_file(clock: ManualClock, world: SimWorld) -> None:
    scenario = load_scenario_file(TESTDATA / "two-vms.yaml")
    assert scenario.name == "two-vms"
    assert [e.alias for e in scenario.events] == ["freeze", "reboot", "mystery"]
    ids = world.play(scenario)
    clock.advance(2000)
    world.tick()
    history = [(c.event_id, c.kind, c.reason, c.sim_time - START) for c in world.truth.changes()]
    freeze, reboot, mystery = ids["freeze"], ids["reboot"], ids["mystery"]
    assert sorted(history, key=lambda h: (h[3], h[0] != freeze)) == sorted(
        [
            (freeze, "appeared", "scenario", 0),
            (freeze, "started", "scenario", 60),
            (freeze, "removed", "completed", 80),
            (reboot, "appeared", "scenario", 10),
            (reboot, "rescheduled", "scenario", 100),
            (reboot, "rescheduled", "scenario", 200),
            (reboot, "started", "not_before", 500),
            (reboot, "removed", "completed", 560),
            (mystery, "appeared", "scenario", 20),
            (mystery, "removed", "completed", 25),
        ],
        key=lambda h: (h[3], h[0] != freeze),
    )


def test_multi_resource_order_is_kept(world: SimWorld, client: httpx.Client, clock: ManualClock) -> None:
    world.play(load_scenario_file(TESTDATA / "two-vms.yaml"))
    clock.advance(20)
    resources = [(e["EventType"], e["Resources"]) for e in get_document(client)["Events"]]
    assert resources == [
        ("Freeze", ["sim-vm-0", "sim-peer-1"]),
        ("Reboot", ["sim-peer-1", "sim-vm-0"]),
        ("Hibernate", ["sim-vm-0"]),
    ]


def test_defaults() -> None:
    (event,) = parse_scenario(MINIMAL, default_name="fallback").events
    assert parse_scenario(MINIMAL, default_name="fallback").name == "fallback"
    assert (
        event.at,
        event.plan.notice,
        event.plan.duration,
        event.plan.started_for,
        event.plan.resources,
        event.plan.event_source,
    ) == (0.0, 900.0, -1, 60.0, ("self",), "Platform")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("events: [", "not valid YAML"),
        ("- 1", "(top level): must be a mapping, got [1]"),
        ("name: x", "events: is required"),
        ("events: []", "events: must be a non-empty list"),
        ("colour: red\n" + MINIMAL, ": colour: unknown key; expected one of: name, description, events"),
        ("events:\n  - {type: Reboot}", "events[0].id: is required"),
        ("events:\n  - {id: e}", "events[0].type: is required"),
        ("events:\n  - {id: e, type: Reboot, notise: 5}", "events[0].notise: unknown key"),
        ("events:\n  - {id: e, type: Reboots}", "events[0].type: must be one of Freeze, Reboot"),
        ("events:\n  - {id: e, type: Reboot, source: Nature}", "events[0].source: must be one of Platform, User"),
        ("events:\n  - {id: e, type: Reboot, notice: soon}", 'events[0].notice: must be a number >= 0, got "soon"'),
        (
            "events:\n  - {id: e, type: Reboot, notice: true}",
            "events[0].notice: must be a number >= 0, got true (a boolean)",
        ),
        ("events:\n  - {id: e, type: Reboot, notice: -5}", "events[0].notice: must be a number >= 0, got -5"),
        ("events:\n  - {id: e, type: Reboot, duration: 1.5}", "events[0].duration: must be an integer"),
        ("events:\n  - {id: e, type: Reboot, at: -1}", "events[0].at: must be a number >= 0, got -1"),
        ("events:\n  - {id: e, type: Reboot, resources: []}", "events[0].resources: must be a non-empty list"),
        ("events:\n  - {id: e, type: Reboot, resources: vm1}", "events[0].resources: must be a non-empty list"),
        ("events:\n  - {id: e, type: Reboot, strict: maybe}", "events[0].strict: must be true or false"),
        ("events:\n  - {id: e, type: Reboot}\n  - {id: e, type: Freeze}", "events[1].id: duplicate id 'e'"),
        ("events:\n  - {id: e, type: Reboot, notice: 100, cancel_at: 100}", "events[0].cancel_at: must be within"),
        ("events:\n  - {id: e, type: Reboot, at: 50, start_at: 10}", "events[0].start_at: must be within"),
        (
            "events:\n  - {id: e, type: Reboot, notice: null, cancel_at: 1}",
            "events[0].cancel_at: not allowed for an event without notice",
        ),
        ("events:\n  - {id: e, type: Reboot, reschedule: {at: 1}}", "events[0].reschedule: must be a list"),
        ("events:\n  - {id: e, type: Reboot, reschedule: [{at: 1}]}", "events[0].reschedule[0].notice: is required"),
        (
            "events:\n  - {id: e, type: Reboot, reschedule: [{at: 1, notice: 5, by: x}]}",
            "events[0].reschedule[0].by: unknown key",
        ),
        (
            "events:\n  - {id: e, type: Reboot, notice: 100, reschedule: [{at: 150, notice: 5}]}",
            "events[0].reschedule[0].at: must be after the previous step (0) and before NotBefore (100)",
        ),
        (
            "events:\n  - {id: e, type: Reboot, reschedule: [{at: 50, notice: 100}, {at: 40, notice: 10}]}",
            "events[0].reschedule[1].at: must be after the previous step (50)",
        ),
    ],
)
def test_invalid_scenarios_name_the_key(text: str, message: str) -> None:
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(text, source="bad.yaml")
    assert str(caught.value).startswith("bad.yaml")
    assert message in str(caught.value)
    assert "\n" not in str(caught.value).split("not valid YAML")[0]


def test_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match=r"cannot read"):
        load_scenario_file(tmp_path / "missing.yaml")


def test_resolve_scenario(tmp_path: Path) -> None:
    assert resolve_scenario("spot-preempt").name == "spot-preempt"
    path = tmp_path / "mine.yaml"
    path.write_text(MINIMAL)
    assert resolve_scenario(str(path)).name == "mine"
    with pytest.raises(ScenarioError, match="neither a built-in"):
        resolve_scenario("no-such-thing")
    with pytest.raises(ScenarioError, match="unknown built-in"):
        builtin_scenario("no-such-thing")


@pytest.mark.parametrize("name", builtin_names())
def test_built_ins_are_valid_and_documented(name: str) -> None:
    scenario = builtin_scenario(name)
    assert scenario.name == name
    assert scenario.description
    assert all(e.plan.description for e in scenario.events)
