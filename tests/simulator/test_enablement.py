"""Enabling and disabling Scheduled Events, as Azure's docs say: "Scheduled Events is enabled for your service
the first time you make a request for events. You should expect a delayed response in your first call of up
to two minutes and you will start receiving events within 5 minutes. Scheduled Events is disabled for your
service if it doesn't make a request to the endpoint for 24 hours." The simulator takes the upper bounds, in
simulated time, on its world and over HTTP."""

from __future__ import annotations

import random
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

import httpx
import pytest

from se_exporter.simulator import EventPlan, ManualClock, SimulatedVM, SimulatorServer, SimWorld
from se_exporter.simulator.enablement import EnablementTimes
from tests.simulator.conftest import START, get_document
from tests.support.wait import wait_for

pytestmark = pytest.mark.pure

FAR = EventPlan("Redeploy", notice=7 * 86_400)  # a degraded host's Redeploy: days ahead, listed throughout
DAY = 86_400.0


def enabled_world(clock: ManualClock, *, start_enabled: bool = True, times: EnablementTimes | None = None) -> SimWorld:
    return SimWorld(
        vm=SimulatedVM(name="sim-vm-0"),
        clock=clock,
        rng=random.Random(5),
        initial_incarnation=40,
        enablement=times or EnablementTimes(),
        start_enabled=start_enabled,
    )


def test_a_day_without_requests_disables_and_the_next_request_enables_with_the_documented_delays(
    clock: ManualClock,
) -> None:
    world = enabled_world(clock)
    world.add_event(FAR)
    assert world.begin_request() is None, "enabled from the start: answered at once"
    assert world.serve_snapshot().incarnation == 41 and len(world.serve_snapshot().events) == 1
    clock.advance(DAY - 1)
    assert world.begin_request() is None, "a request within 24 h keeps the service enabled"
    clock.advance(DAY)
    enabling_at = clock.now()
    assert world.begin_request() == enabling_at + 120, "the first answer after enabling: up to 2 minutes"
    reset = world.truth.changes()[-1]
    assert (reset.kind, reset.reason, reset.incarnation) == ("incarnation_reset", "enabled", 1)
    clock.advance(60)
    assert world.begin_request() == enabling_at + 120, "a request during the enabling waits for the same answer"
    clock.advance(60)
    assert world.begin_request() is None
    hidden = world.serve_snapshot()
    assert (hidden.incarnation, hidden.events) == (1, ()), "events come within 5 minutes, not yet"
    clock.advance(179)
    assert world.serve_snapshot().events == ()
    clock.advance(1)
    listed = world.serve_snapshot()
    assert (listed.incarnation, len(listed.events)) == (2, 1), "listed at last: a new document"
    assert world.truth.changes()[-1].kind == "listed"


def test_a_vm_that_never_asked_is_enabled_by_its_first_request(clock: ManualClock) -> None:
    world = enabled_world(clock, start_enabled=False, times=EnablementTimes(answer_delay=30, events_delay=90))
    assert world.begin_request() == START + 30
    assert world.serve_snapshot().events == ()


def test_never_disabled_when_told(clock: ManualClock) -> None:
    world = enabled_world(clock, times=EnablementTimes(disable_after=None))
    clock.advance(30 * DAY)
    assert world.begin_request() is None


@pytest.fixture
def sim(clock: ManualClock) -> Iterator[tuple[SimWorld, httpx.Client]]:
    world = enabled_world(clock, start_enabled=False)
    world.add_event(FAR)
    with (
        SimulatorServer(world, tick_interval=0.01) as server,
        httpx.Client(base_url=server.url, headers={"Metadata": "true"}, timeout=10, trust_env=False) as client,
    ):
        yield world, client


def test_over_http_the_enabling_answer_waits_for_the_simulated_clock(
    clock: ManualClock, sim: tuple[SimWorld, httpx.Client]
) -> None:
    world, client = sim
    with ThreadPoolExecutor(1) as pool:
        answer: Future[dict[str, Any]] = pool.submit(get_document, client)
        wait_for(
            lambda: world.truth.changes()[-1].kind == "incarnation_reset",
            10,
            "the request to reach the simulator and enable the service",
        )
        clock.advance(119)
        with pytest.raises(FutureTimeout):
            answer.result(timeout=0.3)  # 1 simulated second short of the 2 minutes
        clock.advance(1)
        first = answer.result(timeout=10)
    assert (first["DocumentIncarnation"], first["Events"]) == (1, [])
    (record,) = [r for r in world.truth.requests() if r.method == "GET"]
    assert record.fault == "enabling" and record.sim_time >= START + 120
    clock.advance(180)
    assert len(get_document(client)["Events"]) == 1
