"""Azure's docs: "Scheduled Events is enabled for your service the first time you make a request for events.
You should expect a delayed response in your first call of up to two minutes and you will start receiving
events within 5 minutes. Scheduled Events is disabled for your service if it doesn't make a request to the
endpoint for 24 hours." Against the simulator, which models exactly that (its delays scaled by its speed):
the exporter's start-up, and the poll loop after a day without a look (restored events held, not removed,
until IMDS lists them again)."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator

import pytest

from se_exporter.durable.persistence import Persistence
from se_exporter.imds.client import ClientSettings, IMDSClient, RateLimiter
from se_exporter.imds.document import VMIdentity
from se_exporter.lifecycle import EventStore
from se_exporter.lifecycle.transitions import Transition
from se_exporter.poller import Poller
from se_exporter.poller.loop import PollResult
from se_exporter.simulator import SELF, EventPlan, ManualClock, SimClock, SimulatedVM, SimulatorServer, SimWorld
from se_exporter.simulator.enablement import EnablementTimes
from tests.support.exporter_process import ExporterProcess
from tests.support.exposition import series
from tests.support.state_file import encoded
from tests.support.wait import wait_for

pytestmark = [pytest.mark.posix, pytest.mark.full]

StartExporter = Callable[..., ExporterProcess]
SPEED = 60.0  # the 2-minute first answer takes 2 s, the 5 minutes until events 5 s
DAY = 86_400.0


def test_start_up_on_a_vm_that_never_asked_ready_with_the_first_answer_events_when_they_come(
    start_exporter: StartExporter,
) -> None:
    clock = SimClock(SPEED)
    world = SimWorld(vm=SimulatedVM(name="sim-vm-0"), clock=clock, enablement=EnablementTimes(), start_enabled=False)
    world.add_event(EventPlan("Reboot", notice=900, resources=(SELF,)))  # NotBefore 15 s away in real time
    with SimulatorServer(world) as server:
        exporter = start_exporter(f"--imds.url={server.url}", "--poll.interval=250ms")
        wait_for(lambda: world.enabling is not None, 20, "the exporter's first request")
        enabling = world.enabling
        assert enabling is not None
        answered, listed = clock.to_real_time(enabling.answer_at), clock.to_real_time(enabling.events_at)

        ready = exporter.get("/-/ready")
        traffic = exporter.get("/-/traffic")
        assert ready.status_code == 503, "no answer yet: not ready"
        assert (traffic.status_code, traffic.text) == (200, "sim-vm-0 may take traffic: IMDS has not answered yet\n")

        wait_for(lambda: exporter.get("/-/ready").status_code == 200, 20, "ready")
        ready_at = time.time()
        assert answered - 0.1 <= ready_at <= answered + 2.0, "ready with the first answer, not a retry later"
        assert series(exporter.metrics(), "azure_scheduled_events_event_info") == [], "no event listed yet"
        assert exporter.get("/-/traffic").status_code == 200

        wait_for(lambda: series(exporter.metrics(), "azure_scheduled_events_event_info"), 20, "the event listed")
        assert time.time() >= listed - 0.1
        wait_for(lambda: exporter.get("/-/traffic").status_code == 503, 10, "out of traffic for the Reboot")
        assert "Reboot" in exporter.get("/-/traffic").text
        assert exporter.stop() == 0


class Recorder:
    def __init__(self) -> None:
        self.transitions: list[Transition] = []

    def on_poll(self, result: PollResult) -> None:
        self.transitions += result.transitions


class Wall:
    """The exporter's wall and monotonic clocks, moved by the test together with the simulator's."""

    def __init__(self, sim: ManualClock) -> None:
        self._sim = sim

    def __call__(self) -> float:
        return self._sim.now()

    def advance(self, seconds: float) -> None:
        self._sim.advance(seconds)


@pytest.fixture
def sim() -> Iterator[tuple[SimWorld, ManualClock, str]]:
    clock = ManualClock(start=time.time())
    # No delay of the enabling answer here (a manual clock would hold it until the test moved it): this is
    # about the events that follow it.
    world = SimWorld(
        vm=SimulatedVM(name="sim-vm-0"),
        clock=clock,
        rng=random.Random(9),
        enablement=EnablementTimes(answer_delay=0),
    )
    with SimulatorServer(world, tick_interval=0.01) as server:
        yield world, clock, server.url


def poller(url: str, store: EventStore, wall: Wall, recorder: Recorder) -> Poller:
    client = IMDSClient(ClientSettings(base_url=url, timeout=5.0, first_call_timeout=5.0), RateLimiter(min_interval=0))
    return Poller(
        client=client,
        store=store,
        sinks=[recorder],
        persistence=Persistence(None),
        interval=1.0,
        identity=VMIdentity(name="sim-vm-0"),
        clock=wall,
        monotonic=wall,
    )


def restarted_after(
    days: float, world: SimWorld, clock: ManualClock, url: str, store: EventStore
) -> tuple[Poller, Wall, Recorder]:
    """The exporter stopped for ``days``, then started again from its state file."""
    clock.advance(days * DAY)
    restored = EventStore.from_rows(encoded(store))
    wall, recorder = Wall(clock), Recorder()
    return poller(url, restored, wall, recorder), wall, recorder


def test_after_a_day_without_a_look_an_event_not_listed_yet_is_held_not_cancelled(
    sim: tuple[SimWorld, ManualClock, str],
) -> None:
    """A Redeploy off degraded hardware, announced days ahead, seen; the VM deallocated for a day. The first
    answers after it list nothing (Scheduled Events were disabled); the event comes back within 5 minutes."""
    world, clock, url = sim
    world.add_event(EventPlan("Redeploy", notice=7 * DAY, resources=(SELF,)))
    store, recorder = EventStore(), Recorder()
    first = poller(url, store, Wall(clock), recorder)
    assert first.poll_once() is None
    assert [t.kind for t in recorder.transitions] == ["scheduled"]

    again, wall, recorder = restarted_after(1.5, world, clock, url, store)
    assert again.poll_once() is None
    assert recorder.transitions == [], "held: neither cancelled nor completed"
    assert list(again.store.events) == list(store.events)
    wall.advance(299)
    assert again.poll_once() is None
    assert recorder.transitions == []
    wall.advance(1)
    assert again.poll_once() is None
    assert recorder.transitions == [], "listed again: the same life, no new sighting"
    (state,) = again.store.events.values()
    assert state.life == 1 and state.first_seen == store.events[state.event.event_id].first_seen


def test_after_the_hold_an_event_that_did_not_come_back_is_removed_as_unseen(
    sim: tuple[SimWorld, ManualClock, str],
) -> None:
    """A Reboot seen Scheduled ran while the VM was off: after the hold it is completed, its start unseen."""
    world, clock, url = sim
    world.add_event(EventPlan("Reboot", notice=900, started_for=60, resources=(SELF,)))
    store, recorder = EventStore(), Recorder()
    assert poller(url, store, Wall(clock), recorder).poll_once() is None

    again, wall, recorder = restarted_after(2, world, clock, url, store)
    assert again.poll_once() is None
    assert recorder.transitions == []
    wall.advance(300)
    assert again.poll_once() is None
    (completed,) = recorder.transitions
    assert (completed.kind, completed.started_observed) == ("completed", False)
    assert again.store.events == {}
