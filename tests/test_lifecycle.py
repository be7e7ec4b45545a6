"""The event store: table-driven lifecycles on an injected clock, and a property over any history."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from se_exporter.imds.document import Document, ScheduledEvent
from se_exporter.lifecycle import MAX_NOT_BEFORE_HISTORY, EventStore
from se_exporter.lifecycle.transitions import Transition, TransitionKind
from tests.support.state_file import encoded

pytestmark = pytest.mark.pure

T0 = 1_700_000_000.0
NB1 = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
NB2 = NB1 + timedelta(minutes=10)


def ev(
    event_id: str = "e1", status: str = "Scheduled", not_before: datetime | None = NB1, event_type: str = "Reboot"
) -> ScheduledEvent:
    return ScheduledEvent(
        event_id=event_id,
        event_type=event_type,
        event_status=status,
        resources=("vm-a",),
        not_before=not_before if status == "Scheduled" else None,
    )


Step = tuple[str, str, str, float, float | None]


def play(steps: Sequence[tuple[float, list[ScheduledEvent]]], store: EventStore | None = None) -> list[Step]:
    store = store or EventStore()
    seen: list[Step] = []
    for incarnation, (at, events) in enumerate(steps, start=1):
        for t in store.reconcile(Document(incarnation, tuple(events)), T0 + at):
            seen.append((t.event.event_id, t.kind, t.previous_status, t.observed_at - T0, t.started_seconds))
    return seen


CASES = {
    "scheduled, started, completed": (
        [(0, [ev()]), (10, [ev(status="Started")]), (70, [])],
        [
            ("e1", "scheduled", "", 0, None),
            ("e1", "started", "Scheduled", 10, None),
            ("e1", "completed", "Started", 70, 60.0),
        ],
    ),
    "cancelled while scheduled": (
        [(0, [ev()]), (5, [])],
        [("e1", "scheduled", "", 0, None), ("e1", "cancelled", "Scheduled", 5, None)],
    ),
    "hardware failure appears started": (
        [(0, [ev(status="Started")]), (30, [])],
        [("e1", "started", "", 0, None), ("e1", "completed", "Started", 30, 30.0)],
    ),
    "rescheduled once per new NotBefore": (
        [(0, [ev()]), (1, [ev(not_before=NB2)]), (2, [ev(not_before=NB2)]), (3, [ev(not_before=NB1)])],
        [("e1", "scheduled", "", 0, None), ("e1", "rescheduled", "Scheduled", 1, None)],
    ),
    "first NotBefore for an event seen without one is no reschedule": (
        [(0, [ev(not_before=None)]), (1, [ev()])],
        [("e1", "scheduled", "", 0, None)],
    ),
    "unchanged documents emit nothing": (
        [(0, [ev()]), (1, [ev()]), (2, [ev()])],
        [("e1", "scheduled", "", 0, None)],
    ),
    "two events interleaved": (
        [(0, [ev("a")]), (1, [ev("a"), ev("b", status="Started")]), (2, [ev("b", status="Started")]), (9, [])],
        [
            ("a", "scheduled", "", 0, None),
            ("b", "started", "", 1, None),
            ("a", "cancelled", "Scheduled", 2, None),
            ("b", "completed", "Started", 9, 8.0),
        ],
    ),
    "an unknown status is listed, and starts like any other": (
        [(0, [ev(status="Pending")]), (1, [ev(status="Started")]), (4, [])],
        [
            ("e1", "listed", "", 0, None),
            ("e1", "started", "Pending", 1, None),
            ("e1", "completed", "Started", 4, 3.0),
        ],
    ),
    "a Spot eviction-risk notice: listed, then removed": (
        [(0, [ev(status="Advisory", event_type="SpotRebalanceRecommendation")]), (1, []), (2, [])],
        [("e1", "listed", "", 0, None), ("e1", "removed", "Advisory", 1, None)],
    ),
    "an unknown type in an unknown status: listed, updated, removed": (
        [
            (0, [ev(status="Quiet", event_type="HostUpgrade")]),
            (1, [ev(status="Loud", event_type="HostUpgrade")]),
            (2, []),
        ],
        [
            ("e1", "listed", "", 0, None),
            ("e1", "updated", "Quiet", 1, None),
            ("e1", "removed", "Loud", 2, None),
        ],
    ),
    "Scheduled, Paused, gone: updated, then removed (no start is made up)": (
        [(0, [ev()]), (1, [ev(status="Paused")]), (2, [ev(status="Paused")]), (3, [])],
        [
            ("e1", "scheduled", "", 0, None),
            ("e1", "updated", "Scheduled", 1, None),
            ("e1", "removed", "Paused", 3, None),
        ],
    ),
    "an Advisory that becomes Scheduled, then is called off": (
        [(0, [ev(status="Advisory")]), (1, [ev()]), (2, [])],
        [
            ("e1", "listed", "", 0, None),
            ("e1", "updated", "Advisory", 1, None),
            ("e1", "cancelled", "Scheduled", 2, None),
        ],
    ),
    "a status flapping is said once each way": (
        [(0, [ev()]), (1, [ev(status="Paused")]), (2, [ev()]), (3, [ev(status="Paused")]), (4, [ev()])],
        [
            ("e1", "scheduled", "", 0, None),
            ("e1", "updated", "Scheduled", 1, None),
            ("e1", "updated", "Paused", 2, None),
        ],
    ),
    "changed in place: updated once per new content": (
        [
            (0, [ev(event_type="Freeze")]),
            (1, [ev(event_type="Terminate")]),
            (2, [ev(event_type="Terminate")]),
            (3, [ev(event_type="Terminate", status="Started")]),
            (4, []),
        ],
        [
            ("e1", "scheduled", "", 0, None),
            ("e1", "updated", "Scheduled", 1, None),
            ("e1", "started", "Scheduled", 3, None),
            ("e1", "completed", "Started", 4, 1.0),
        ],
    ),
    "rescheduled and changed in place at once": (
        [(0, [ev()]), (1, [ev(not_before=NB2, event_type="Redeploy")])],
        [
            ("e1", "scheduled", "", 0, None),
            ("e1", "rescheduled", "Scheduled", 1, None),
            ("e1", "updated", "Scheduled", 1, None),
        ],
    ),
    "back to Scheduled after Started is an update and does not start twice": (
        [(0, [ev(status="Started")]), (1, [ev()]), (2, [ev(status="Started")]), (5, [])],
        [
            ("e1", "started", "", 0, None),
            ("e1", "updated", "Started", 1, None),
            ("e1", "completed", "Started", 5, 5.0),
        ],
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_lifecycle(name: str) -> None:
    steps, expected = CASES[name]
    assert play(steps) == expected


def test_incarnation_going_backwards_is_accepted() -> None:
    store = EventStore()
    store.reconcile(Document(900, (ev(),)), T0)
    assert store.reconcile(Document(1, (ev(),)), T0 + 1) == []
    assert store.incarnation == 1


def test_is_unchanged_compares_incarnation_and_events() -> None:
    store = EventStore()
    store.reconcile(Document(3, (ev(),)), T0)
    assert store.is_unchanged(Document(3, (ev(),)))
    assert not store.is_unchanged(Document(4, (ev(),)))
    assert not store.is_unchanged(Document(3, (ev(status="Started"),)))
    assert not store.is_unchanged(Document(3, ()))


def test_transition_uid_is_stable_and_distinct() -> None:
    def uid(kind: str, event: ScheduledEvent) -> str:
        return Transition(TransitionKind(kind), event, "", T0, 1, T0, "Scheduled").uid

    assert uid("scheduled", ev()) == uid("scheduled", ev())
    assert uid("scheduled", ev()) != uid("started", ev())
    assert uid("rescheduled", ev(not_before=NB1)) != uid("rescheduled", ev(not_before=NB2))
    assert uid("scheduled", ev(not_before=NB1)) == uid("scheduled", ev(not_before=NB2))
    # pinned: receivers deduplicate on it, so it must never change between releases
    assert uid("scheduled", ev()) == "2facd483-e3eb-5505-9ed6-16b3ec19caa5"


def test_an_event_id_that_returns_starts_a_new_life() -> None:
    store = EventStore()
    first = store.reconcile(Document(1, (ev(),)), T0)
    gone = store.reconcile(Document(2, ()), T0 + 1)
    again = store.reconcile(Document(3, (ev(),)), T0 + 2)
    assert [t.kind for t in first + gone + again] == ["scheduled", "cancelled", "scheduled"]
    assert again[0].life == 2
    assert again[0].uid != first[0].uid


# --- property: any history gives every event one lifecycle: opened once, closed once, each step once ---

statuses = st.sampled_from(["Scheduled", "Started", "Advisory", "Paused"])
not_befores = st.sampled_from([NB1, NB2, NB1 + timedelta(hours=1)])
event_types = st.sampled_from(["Reboot", "SpotRebalanceRecommendation", "HostUpgrade"])
event_views = st.tuples(statuses, not_befores, event_types)
documents = st.dictionaries(st.sampled_from(["a", "b", "c"]), event_views, max_size=3)
OPENING = {"scheduled", "started", "listed"}
CLOSING = {"completed", "cancelled", "removed"}


@settings(max_examples=300, deadline=None)
@given(st.lists(documents, max_size=12))
def test_any_history_gives_every_event_a_whole_lifecycle(history: list[dict[str, tuple[str, datetime, str]]]) -> None:
    store = EventStore()
    emitted: list[Transition] = []
    for step, listed in enumerate([*history, {}]):
        events = tuple(
            ev(event_id, status, nb, event_type) for event_id, (status, nb, event_type) in sorted(listed.items())
        )
        emitted += store.reconcile(Document(step, events), T0 + step)
    uids = [t.uid for t in emitted]
    assert len(uids) == len(set(uids)), "a transition was emitted twice"
    lives: dict[tuple[str, int], list[str]] = {}
    for t in emitted:
        lives.setdefault((t.event.event_id, t.life), []).append(t.kind)
    for kinds in lives.values():
        assert kinds[0] in OPENING and kinds[-1] in CLOSING, kinds
        assert sum(kind in OPENING for kind in kinds) == 1 + (kinds[0] != "started" and "started" in kinds), kinds
        assert sum(kind in CLOSING for kind in kinds) == 1, kinds
        assert kinds.count("started") <= 1, kinds
        if "started" in kinds:
            assert kinds[-1] == "completed", kinds
    assert store.events == {}


def test_impact_and_cause_follow_the_event_and_an_event_that_appeared_started_stays_failure_across_restarts() -> None:
    """Azure's docs: after a hardware failure the VM gets a Reboot "with EventStatus = Started"."""
    store = EventStore()
    store.reconcile(Document(1, ()), T0)  # watching from here on
    started = ScheduledEvent(event_id="hw", event_type="Reboot", event_status="Started", event_source="Platform")
    (first,) = store.reconcile(Document(2, (started, ev("lm", event_type="Freeze"))), T0 + 1)[:1]
    assert (first.impact, first.cause) == ("reboot", "failure")
    assert (store.events["lm"].impact, store.events["lm"].cause) == ("pause", "unknown")
    saved = encoded(store)
    for key, body in saved["events"].items():  # a state file written before impact and cause existed
        state = json.loads(body)
        del state["impact"], state["cause"]
        saved["events"][key] = json.dumps(state).encode()
    restored = EventStore.from_rows(saved)
    assert (restored.events["hw"].impact, restored.events["hw"].cause) == ("reboot", "failure")
    (completed,) = restored.reconcile(Document(3, (ev("lm", event_type="Freeze"),)), T0 + 60)
    assert (completed.kind, completed.impact, completed.cause) == ("completed", "reboot", "failure")


@pytest.mark.parametrize(
    ("looks", "blind", "cause"),
    [
        pytest.param(0, False, "platform", id="first look after a start without state"),
        pytest.param(1, True, "platform", id="first look after a gap in the view"),
        pytest.param(1, False, "failure", id="appeared while watching"),
    ],
)
def test_a_platform_reboot_found_started_is_a_failure_only_if_it_appeared_while_watching(
    looks: int, blind: bool, cause: str
) -> None:
    """Not seen appearing, a Started Reboot may have been Scheduled for days: its cause is its source."""
    store = EventStore()
    for look in range(looks):
        store.reconcile(Document(1 + look, ()), T0 + look)
    started = ScheduledEvent(event_id="hw", event_type="Reboot", event_status="Started", event_source="Platform")
    blind_since = T0 if blind else None
    (first,) = store.reconcile(Document(9, (started,)), T0 + 30, blind_since=blind_since)
    assert (first.kind, first.impact, first.cause) == ("started", "reboot", cause)


def test_an_event_rescheduled_at_every_poll_keeps_a_bounded_history() -> None:
    """A NotBefore that changed every poll once grew the state by about 0.9 KiB per poll, for ever."""
    store = EventStore()
    for minute in range(500):
        store.reconcile(Document(minute + 1, (ev(not_before=NB1 + timedelta(minutes=minute)),)), T0 + minute)
    history = store.events["e1"].not_before_history
    assert len(history) == MAX_NOT_BEFORE_HISTORY and history[-1] == NB1 + timedelta(minutes=499)
    assert sum(len(body) for rows in encoded(store).values() for body in rows.values()) < 4096


def test_an_update_says_what_changed_and_has_a_uid_per_content() -> None:
    store = EventStore()
    store.reconcile(Document(1, (ev(event_type="Freeze"),)), T0)
    grown = msgspec.structs.replace(ev(event_type="Terminate"), resources=("vm-a", "vm-b"))
    (first,) = store.reconcile(Document(2, (grown,)), T0 + 1)
    assert first.kind is TransitionKind.UPDATED
    assert first.changes == "the event changed (EventType Freeze -> Terminate; Resources [vm-a] -> [vm-a, vm-b])"
    (back,) = store.reconcile(Document(3, (ev(event_type="Freeze"),)), T0 + 2)
    assert back.changes == "the event changed (EventType Terminate -> Freeze; Resources [vm-a, vm-b] -> [vm-a])"
    assert len({first.uid, back.uid}) == 2
    assert store.reconcile(Document(4, (grown,)), T0 + 3) == [], "once per new content"


def test_a_status_change_says_event_status_among_the_changes() -> None:
    store = EventStore()
    store.reconcile(Document(1, (ev(),)), T0)
    (paused,) = store.reconcile(Document(2, (ev(status="Paused"),)), T0 + 1)
    assert (paused.kind, paused.previous_status, paused.event.event_status) == ("updated", "Scheduled", "Paused")
    assert paused.changes == "the event changed (EventStatus Scheduled -> Paused)"
    (started,) = store.reconcile(Document(3, (ev(status="Started"),)), T0 + 2)
    assert (started.kind, started.changes) == ("started", ""), "a start is no update"


def test_an_updated_uid_of_a_scheduled_event_is_the_one_earlier_versions_gave() -> None:
    """Receivers may hold it: a Scheduled event's content key leaves the status out, as before issue 52."""
    event = msgspec.structs.replace(ev(event_type="Terminate"), event_id="EV-1")
    updated = Transition(TransitionKind.UPDATED, event, "Scheduled", T0, 2, T0, "Scheduled")
    assert updated.uid == "ea9ad8b2-8762-545b-bd5d-61221de2182b"
    paused = msgspec.structs.replace(event, event_status="Paused", not_before=None)
    assert Transition(TransitionKind.UPDATED, paused, "Scheduled", T0, 3, T0, "Scheduled").uid != updated.uid


# ----- What was not seen (issue 38): a gap in the view across NotBefore is a completion, not a cancellation -----

NB1_T = NB1.timestamp()
UNSEEN = {
    # name: (NotBefore relative to the last look before the removal, gap since (relative) or None,
    #        expected kind, started_observed, observed_until_not_before)
    "gone before its NotBefore, watched: cancelled": (+600, None, "cancelled", None, False),
    "gone after its NotBefore passed, watched across it: cancelled": (-5, None, "cancelled", None, True),
    "NotBefore passed inside the gap: completed, start not seen": (+5, 0, "completed", False, None),
    "gap, but the NotBefore is still to come: cancelled": (+600, 0, "cancelled", None, False),
    "NotBefore passed before the gap, while watched: cancelled": (-5, 0, "cancelled", None, True),
}


@pytest.mark.parametrize("name", sorted(UNSEEN))
def test_a_removal_across_a_gap_in_the_view(name: str) -> None:
    not_before_after_look, gap, kind, started_observed, observed_until = UNSEEN[name]
    look = NB1_T - not_before_after_look  # the last look at the event, still Scheduled
    removal_at = look + 30  # the next look, 30 s later: the event is gone
    store = EventStore()
    store.reconcile(Document(1, (ev(),)), look - 60)
    store.reconcile(Document(2, (ev(),)), look)  # (an unchanged document is not reconciled by the loop)
    blind_since = None if gap is None else look + gap
    (removal,) = store.reconcile(Document(3, ()), removal_at, blind_since=blind_since)
    assert (removal.kind, removal.started_observed, removal.observed_until_not_before) == (
        kind,
        started_observed,
        observed_until,
    )
    assert removal.started_seconds is None, "no time in Started is made up"


def test_a_restored_store_remembers_its_last_look() -> None:
    store = EventStore()
    store.reconcile(Document(1, (ev(),)), NB1_T - 120)
    restored = EventStore.from_rows(encoded(store))
    assert restored.last_look == NB1_T - 120


def test_an_observed_completion_says_its_start_was_seen() -> None:
    store = EventStore()
    store.reconcile(Document(1, (ev(),)), T0)
    store.reconcile(Document(2, (ev(status="Started"),)), T0 + 10)
    (done,) = store.reconcile(Document(3, ()), T0 + 40)
    assert (done.kind, done.started_observed, done.started_seconds) == ("completed", True, 30.0)


# ----- Durations on a stepped wall clock (issue 38, point 3): the monotonic clock within a process -----------


@pytest.mark.parametrize("step", [-3600.0, +3600.0])
def test_time_in_started_ignores_a_step_of_the_wall_clock(step: float) -> None:
    store = EventStore()
    store.reconcile(Document(1, (ev(status="Started"),)), T0, mono=100.0)
    state = store.events["e1"]
    assert store.started_seconds(state, T0 + step + 5, mono=105.0) == 5.0, "the gauge, during the event"
    (done,) = store.reconcile(Document(2, ()), T0 + step + 10, mono=110.0)
    assert done.started_seconds == 10.0


def test_across_a_restart_time_in_started_is_the_saved_wall_clock_start_and_never_negative() -> None:
    store = EventStore()
    store.reconcile(Document(1, (ev(status="Started"),)), T0, mono=100.0)
    restored = EventStore.from_rows(encoded(store))
    assert restored.started_seconds(restored.events["e1"], T0 + 42, mono=5.0) == 42.0
    (done,) = restored.reconcile(Document(2, ()), T0 - 3600, mono=6.0)  # the wall clock stepped back since
    assert done.started_seconds == 0.0
