"""Property test: whatever the order of operations, every event follows the documented lifecycle."""

from __future__ import annotations

import random
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from se_exporter.simulator import EventPlan, ManualClock, SimWorld
from tests.simulator.conftest import START

pytestmark = pytest.mark.pure

# appeared Scheduled [rescheduled...] [started] [removed], or appeared Started [removed]
VALID = re.compile(r"^(S(R)*(T(X)?|X)?|A(X)?)$")

plans = st.builds(
    EventPlan,
    event_type=st.sampled_from(["Freeze", "Reboot", "Preempt"]),
    notice=st.one_of(st.none(), st.floats(0, 100)),
    started_for=st.floats(0, 50),
)
operations = st.lists(
    st.one_of(
        st.tuples(st.just("add"), plans),
        st.tuples(st.just("advance"), st.floats(0, 60)),
        st.tuples(st.sampled_from(["approve", "start", "cancel", "complete"]), st.integers(0, 20)),
        st.tuples(st.just("reschedule"), st.tuples(st.integers(0, 20), st.floats(0, 100))),
    ),
    max_size=40,
)


def run(ops: list[tuple[str, object]]) -> SimWorld:
    clock = ManualClock(start=START)
    world = SimWorld(clock=clock, rng=random.Random(0))
    ids: list[str] = []

    def pick(index: object) -> str:
        assert isinstance(index, int)
        return ids[index % len(ids)] if ids else "none"

    for name, arg in ops:
        if name == "add":
            assert isinstance(arg, EventPlan)
            ids.append(world.add_event(arg))
        elif name == "advance":
            assert isinstance(arg, float)
            clock.advance(arg)
            world.tick()
        elif name == "approve":
            world.approve([pick(arg)])
        elif name == "reschedule":
            assert isinstance(arg, tuple)
            world.reschedule(pick(arg[0]), arg[1])
        else:
            getattr(world, f"{name}_event")(pick(arg))
    clock.advance(1000)
    world.tick()
    return world


@settings(max_examples=150, deadline=None)
@given(operations)
def test_lifecycle_invariants(ops: list[tuple[str, object]]) -> None:
    world = run(ops)
    changes = world.truth.changes()
    letters: dict[str, str] = {}
    for change in changes:
        letter = {"rescheduled": "R", "started": "T", "removed": "X"}.get(change.kind)
        if change.kind == "appeared":
            letter = "S" if change.status == "Scheduled" else "A"
        assert letter is not None and change.event_id is not None
        letters[change.event_id] = letters.get(change.event_id, "") + letter
    assert all(VALID.match(seq) for seq in letters.values()), letters
    # Everything finishes: notices and Started times are finite.
    assert world.snapshot().events == ()
    assert all(seq.endswith("X") for seq in letters.values())
    # Time never goes backwards in the record, and the incarnation never repeats.
    assert [c.sim_time for c in changes] == sorted(c.sim_time for c in changes)
    incarnations = [c.incarnation for c in changes]
    assert incarnations == sorted(incarnations)
    # Every change is visible: a cancelled event left while Scheduled, a completed one while Started.
    for change in changes:
        if change.kind == "removed":
            assert (change.reason, change.previous_status) in {("cancelled", "Scheduled"), ("completed", "Started")}
