"""Each built-in scenario, as a client polling with a hand-driven clock sees it."""

from __future__ import annotations

import random
from typing import Any

import httpx
import pytest

from se_exporter.simulator import ManualClock, SimWorld, builtin_names, builtin_scenario, format_rfc1123
from tests.simulator.conftest import START, get_document

pytestmark = pytest.mark.pure

# (offset in simulated seconds, status or None when gone, NotBefore offset or None for "")
Step = tuple[float, str | None, float | None]

SEQUENCES: dict[str, tuple[str, str, list[str], list[Step]]] = {
    "freeze-live-migration": (
        "Freeze",
        "Platform",
        ["sim-vm-0"],
        [
            (0, "Scheduled", 900),
            (899, "Scheduled", 900),
            (900, "Started", None),
            (929, "Started", None),
            (930, None, None),
        ],
    ),
    "host-maintenance-freeze": (
        "Freeze",
        "Platform",
        ["sim-vm-0"],
        [(0, "Scheduled", 900), (900, "Started", None), (919, "Started", None), (920, None, None)],
    ),
    "platform-redeploy-failure": (
        "Redeploy",
        "Platform",
        ["sim-vm-0"],
        [(0, "Scheduled", 172800), (172800, "Started", None), (173039, "Started", None), (173040, None, None)],
    ),
    "freeze-no-impact": (
        "Freeze",
        "Platform",
        ["sim-vm-0"],
        [(0, "Scheduled", 900), (900, "Started", None), (919, "Started", None), (920, None, None)],
    ),
    "user-reboot": (
        "Reboot",
        "User",
        ["sim-vm-0"],
        [(0, "Scheduled", 900), (900, "Started", None), (1019, "Started", None), (1020, None, None)],
    ),
    "user-redeploy": (
        "Redeploy",
        "User",
        ["sim-vm-0"],
        [(0, "Scheduled", 600), (600, "Started", None), (899, "Started", None), (900, None, None)],
    ),
    "spot-preempt": (
        "Preempt",
        "Platform",
        ["sim-vm-0"],
        [(0, "Scheduled", 30), (29, "Scheduled", 30), (30, "Started", None), (60, None, None)],
    ),
    "spot-eviction-risk-passed": (
        "SpotRebalanceRecommendation",
        "Platform",
        ["sim-vm-0"],
        [(0, "Advisory", None), (599, "Advisory", None), (600, None, None)],
    ),
    "terminate": (
        "Terminate",
        "User",
        ["sim-vm-0"],
        [(0, "Scheduled", 300), (300, "Started", None), (360, None, None)],
    ),
    "cancelled-maintenance": (
        "Reboot",
        "Platform",
        ["sim-vm-0", "sim-peer-1"],
        [(0, "Scheduled", 900), (299, "Scheduled", 900), (300, None, None), (2000, None, None)],
    ),
    "hardware-failure": (
        "Reboot",
        "Platform",
        ["sim-vm-0"],
        [(0, "Started", None), (299, "Started", None), (300, None, None)],
    ),
    "user-reboot-auto-approved": (
        "Reboot",
        "User",
        ["sim-vm-0"],
        [(0, "Started", None), (119, "Started", None), (120, None, None)],
    ),
    "reschedule": (
        "Reboot",
        "Platform",
        ["sim-peer-1", "sim-vm-0"],
        [
            (0, "Scheduled", 900),
            (119, "Scheduled", 900),
            (120, "Scheduled", 1800),
            (900, "Scheduled", 1800),
            (1800, "Started", None),
            (1920, None, None),
        ],
    ),
}


def observe(document: dict[str, Any]) -> tuple[str | None, str]:
    events = document["Events"]
    assert len(events) <= 1
    return (events[0]["EventStatus"], events[0]["NotBefore"]) if events else (None, "")


def test_every_built_in_has_a_sequence() -> None:
    assert set(builtin_names()) == {*SEQUENCES, "spot-eviction-risk"}  # one event each, or a test of its own


def test_spot_eviction_risk_is_an_advisory_then_a_preempt_and_the_eviction(
    clock: ManualClock, world: SimWorld, client: httpx.Client
) -> None:
    ids = world.play(builtin_scenario("spot-eviction-risk"))
    seen: list[tuple[int, list[tuple[str, str, str, str]]]] = []
    for offset in (0, 119, 120, 149, 150, 179, 180):
        clock.advance(offset - (seen[-1][0] if seen else 0))
        events = get_document(client)["Events"]
        seen.append((offset, [(e["EventId"], e["EventType"], e["EventStatus"], e["NotBefore"]) for e in events]))
    risk = (ids["risk"], "SpotRebalanceRecommendation", "Advisory", "")
    coming = (ids["preempt"], "Preempt", "Scheduled", format_rfc1123(START + 150))
    started = (ids["preempt"], "Preempt", "Started", "")
    assert seen == [
        (0, [risk]),
        (119, [risk]),
        (120, [risk, coming]),
        (149, [risk, coming]),
        (150, [risk, started]),
        (179, [risk, started]),
        (180, []),  # evicted: the notice goes with the VM
    ]


def test_an_approval_of_an_advisory_does_nothing(clock: ManualClock, world: SimWorld, client: httpx.Client) -> None:
    """Acknowledging a Spot eviction-risk notice does nothing: IMDS answers 200, the notice stays as it was."""
    (event_id,) = world.play(builtin_scenario("spot-eviction-risk-passed")).values()
    before = get_document(client)
    assert world.approve([event_id]) == {event_id: "ignored"}
    assert get_document(client) == before
    clock.advance(600)
    assert get_document(client)["Events"] == []
    assert [(c.kind, c.reason, c.status) for c in world.truth.changes()] == [
        ("appeared", "scenario", "Advisory"),
        ("removed", "removed", None),
    ]


@pytest.mark.parametrize("name", sorted(SEQUENCES))
def test_built_in_scenario_sequence(name: str, clock: ManualClock, world: SimWorld, client: httpx.Client) -> None:
    event_type, source, resources, steps = SEQUENCES[name]
    ids = world.play(builtin_scenario(name))
    (event_id,) = ids.values()
    elapsed, previous, incarnation = 0.0, None, 0
    for offset, status, not_before in steps:
        clock.advance(offset - elapsed)
        elapsed = offset
        document = get_document(client)
        seen = observe(document)
        assert seen == (status, "" if not_before is None else format_rfc1123(START + not_before)), offset
        if status is not None:
            event = document["Events"][0]
            assert (event["EventId"], event["EventType"], event["EventSource"], event["Resources"]) == (
                event_id,
                event_type,
                source,
                resources,
            )
            assert event["Description"]
        # The incarnation moves exactly when what the client sees moves.
        assert (document["DocumentIncarnation"] != incarnation) == (seen != previous), offset
        previous, incarnation = seen, document["DocumentIncarnation"]


@pytest.mark.parametrize(
    ("name", "kinds"),
    [
        ("freeze-live-migration", [("appeared", "scenario"), ("started", "not_before"), ("removed", "completed")]),
        ("cancelled-maintenance", [("appeared", "scenario"), ("removed", "cancelled")]),
        ("hardware-failure", [("appeared", "scenario"), ("removed", "completed")]),
        (
            "reschedule",
            [
                ("appeared", "scenario"),
                ("rescheduled", "scenario"),
                ("started", "not_before"),
                ("removed", "completed"),
            ],
        ),
    ],
)
def test_ground_truth_of_a_scenario(
    name: str, clock: ManualClock, world: SimWorld, kinds: list[tuple[str, str]]
) -> None:
    world.play(builtin_scenario(name))
    clock.advance(5000)  # one jump: every change still gets its own due instant
    world.tick()
    changes = world.truth.changes()
    assert [(c.kind, c.reason) for c in changes] == kinds
    assert [c.sim_time for c in changes] == sorted(c.sim_time for c in changes)
    assert [c.incarnation for c in changes] == list(range(1, len(changes) + 1))


def test_hardware_failure_appears_started(world: SimWorld) -> None:
    world.play(builtin_scenario("hardware-failure"))
    (change,) = world.truth.changes()
    assert (change.kind, change.status, change.previous_status, change.not_before) == ("appeared", "Started", None, "")


def test_jump_gives_the_same_history_as_fine_ticks() -> None:
    def history(step: float) -> list[tuple[str, str, float, int]]:
        clock = ManualClock(start=START)
        world = SimWorld(clock=clock, rng=random.Random(1))
        world.loop([builtin_scenario(n) for n in builtin_names()], gap=7, repeat=False)
        for _ in range(int(10_000 / step)):
            clock.advance(step)
            world.tick()
        return [(c.kind, c.event_id or "", c.sim_time, c.incarnation) for c in world.truth.changes()]

    assert history(10_000) == history(1)


def test_loop_plays_scenarios_in_order_and_starts_over(clock: ManualClock, world: SimWorld) -> None:
    world.loop([builtin_scenario("hardware-failure"), builtin_scenario("spot-preempt")], gap=10)
    clock.advance(300 + 10 + 60 + 10 + 1)
    world.tick()
    appeared = [(c.event_type, c.sim_time - START) for c in world.truth.changes() if c.kind == "appeared"]
    # hardware failure at 0 (gone at 300), Preempt at 310 (gone at 370), hardware failure again at 380.
    assert appeared == [("Reboot", 0), ("Preempt", 310), ("Reboot", 380)]
    ids = [c.event_id for c in world.truth.changes() if c.kind == "appeared"]
    assert len(set(ids)) == 3  # fresh GUID on every play


def test_loop_without_repeat_stops_after_the_last_scenario(clock: ManualClock, world: SimWorld) -> None:
    world.loop([builtin_scenario("spot-preempt")], gap=1, repeat=False)
    clock.advance(1000)
    world.tick()
    assert [c.kind for c in world.truth.changes()] == ["appeared", "started", "removed"]


def test_stop_loop_lets_the_current_scenario_finish(clock: ManualClock, world: SimWorld) -> None:
    world.loop([builtin_scenario("spot-preempt")], gap=1)
    world.stop_loop()
    clock.advance(1000)
    world.tick()
    assert [c.kind for c in world.truth.changes()] == ["appeared", "started", "removed"]


def test_approval_overtakes_not_before(clock: ManualClock, world: SimWorld, client: httpx.Client) -> None:
    ids = world.play(builtin_scenario("freeze-live-migration"))
    clock.advance(100)
    assert world.approve([ids["freeze"]]) == {ids["freeze"]: "started"}
    clock.advance(30)
    assert get_document(client)["Events"] == []  # completed 30 s after the approval, not after NotBefore
    kinds = [(c.kind, c.reason, c.sim_time - START) for c in world.truth.changes()]
    assert kinds == [("appeared", "scenario", 0), ("started", "approval", 100), ("removed", "completed", 130)]


def test_delayed_play(clock: ManualClock, world: SimWorld, client: httpx.Client) -> None:
    world.play(builtin_scenario("spot-preempt"), delay=50)
    assert get_document(client)["Events"] == []
    clock.advance(50)
    assert get_document(client)["Events"][0]["EventType"] == "Preempt"
