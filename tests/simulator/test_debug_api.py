"""The /_sim/* debug API, for tests driving a simulator in another process."""

from __future__ import annotations

import httpx
import pytest

from se_exporter.simulator import SimClock, SimulatorServer, SimWorld, builtin_scenario
from tests.simulator.conftest import EVENTS_PATH, approve, eventually, get_document


def test_truth_and_requests(world: SimWorld, client: httpx.Client) -> None:
    ids = world.play(builtin_scenario("freeze-live-migration"))
    get_document(client)
    assert approve(client, ids["freeze"]).status_code == 200
    truth = client.get("/_sim/truth").json()
    assert [(c["kind"], c["reason"]) for c in truth["changes"]] == [("appeared", "scenario"), ("started", "approval")]
    assert truth["approvals"][0]["outcomes"] == {ids["freeze"]: "started"}
    requests = client.get("/_sim/requests").json()
    assert [(r["method"], r["status"]) for r in requests] == [("GET", 200), ("POST", 200)]
    assert requests[0]["path"] == EVENTS_PATH + "?api-version=2020-07-01"
    assert len(client.get("/_sim/requests").json()) == 2  # debug requests are not recorded


def test_state(world: SimWorld, client: httpx.Client) -> None:
    ids = world.play(builtin_scenario("reschedule"))
    state = client.get("/_sim/state").json()
    assert state["incarnation"] == 1 and state["speed"] == 1.0
    (event,) = state["events"]
    assert (event["event_id"], event["status"], event["resources"]) == (
        ids["maintenance"],
        "Scheduled",
        ["sim-peer-1", "sim-vm-0"],
    )
    assert event["not_before_sim"] == state["sim_time"] + 900
    assert state["vm"]["name"] == "sim-vm-0"


def test_play_over_http(client: httpx.Client) -> None:
    response = client.post("/_sim/play", json={"scenario": "hardware-failure"})
    assert response.status_code == 200
    (event_id,) = response.json()["event_ids"].values()
    assert get_document(client)["Events"][0]["EventId"] == event_id
    inline = {"name": "inline", "events": [{"id": "x", "type": "Freeze", "notice": 60}]}
    response = client.post("/_sim/play", json={"scenario": inline, "delay": 0})
    assert set(response.json()["event_ids"]) == {"x"}
    assert len(get_document(client)["Events"]) == 2


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"scenario": "nope"}, "unknown built-in scenario 'nope'"),
        ({"scenario": {"events": [{"id": "x", "type": "Frieze"}]}}, "events[0].type"),
        ({"scenario": 5}, "must be a built-in name or a scenario object"),
        ({"scenario": "spot-preempt", "delay": -1}, "delay"),
        ({}, "body must be"),
    ],
)
def test_play_errors(client: httpx.Client, body: object, message: str) -> None:
    response = client.post("/_sim/play", json=body)
    assert response.status_code == 400
    assert message in response.json()["error"]


def test_unknown_debug_path_and_method(client: httpx.Client) -> None:
    assert client.get("/_sim/nothing").status_code == 404
    assert client.post("/_sim/truth").status_code == 405
    assert client.post("/_sim/play", content=b"{").status_code == 400


def test_accelerated_real_time_run() -> None:
    """Real clock at speed 100, driven by the ticker alone: a 30 s Preempt notice runs its course in sim time
    while about a hundredth of it passes in real time."""
    world = SimWorld(clock=SimClock(100))
    ids = world.play(builtin_scenario("spot-preempt"))
    with SimulatorServer(world, tick_interval=0.01) as server, httpx.Client(trust_env=False) as client:
        # 0.3 s expected; 20 s is over 60 times that, and at speed 1 the notice alone would take 30 s.
        assert world.truth.wait_for(lambda t: any(c.kind == "removed" for c in t.changes()), timeout=20)
        eventually(lambda: client.get(server.url + "/_sim/state").json()["events"] == [], what="empty document")
    kinds = [(c.kind, c.event_id) for c in world.truth.changes()]
    assert kinds == [("appeared", ids["preempt"]), ("started", ids["preempt"]), ("removed", ids["preempt"])]
    appeared, started, _ = world.truth.changes()
    assert started.sim_time - appeared.sim_time == 30  # the notice, in sim time: exactly, however late the tick
    # The sim clock never runs ahead of 100 x real time: the start took at least a hundredth of the notice.
    assert (started.real_monotonic - appeared.real_monotonic) * 100 >= 30 - 1  # less one tick (1 sim second)
