"""The event store: a pure state machine from IMDS documents to lifecycle transitions.

``reconcile(document, now)`` compares a document with what the store last saw and returns the
transitions of docs/design.md, ``updated`` included (the same EventId saying another thing: another
type, other Resources, another status than by a start; the audit trail must not keep quiet about it).
Every listed event has a whole lifecycle, whatever its type or status: it opens (``scheduled``,
``started``, or ``listed`` for any other status, e.g. a Spot eviction-risk notice's ``Advisory``) and it
closes (``completed``, ``cancelled``, or ``removed`` from any other status). It performs no I/O and reads
no clock: callers pass ``now`` (Unix seconds), so tests drive it with any timeline and a restored
store continues where it left off.

What was not seen: the caller says when its view had a gap (``blind_since``: the wall time of its last
look before it, a restart included). An event last seen Scheduled and gone now is ``cancelled`` when its
NotBefore has not passed, or passed while the caller was looking; when it passed inside the gap, the
maintenance most likely ran unseen (the events that restart or pause the VM are the ones a poll loop
misses), so it is ``completed`` with ``started_observed=False``, and no start or time in Started is made up.

Time in Started is measured on the caller's monotonic clock (``mono``) within a process, so a step of the
wall clock never makes it negative or inflates it; across a restart, from the saved wall-clock start.
``rows``/``from_rows`` are its own codec for the state file: a row per listed event (``events``), a row
per recently removed event (``removed_events``: its last life, how and when it ended, which the lifecycle
spans of a run without OpenTelemetry are closed with later) and one row for the rest (``event_store``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime
from types import MappingProxyType
from typing import Annotated

import msgspec

from se_exporter.durable.persistence import Tables, decode_row
from se_exporter.imds.document import (
    SCHEDULED,
    STARTED,
    Document,
    ScheduledEvent,
    content,
    describe_change,
    status_changed,
)
from se_exporter.imds.impact import classify
from se_exporter.lifecycle.transitions import EventState, Transition, TransitionKind, UnixTime, content_key

log = logging.getLogger(__name__)
MAX_REMEMBERED_REMOVALS = 1000
# NotBefores remembered per event, newest kept: a NotBefore that changes every poll must not grow the
# state (and the state file, rewritten at each change) without end. A NotBefore older than these that
# comes back is reported as a reschedule again.
MAX_NOT_BEFORE_HISTORY = 32
# Contents said by "updated" remembered per event, likewise: "updated" is said once per new content (a status
# flapping between two values, or a field going back and forth, is said once each way), within these.
MAX_UPDATED_CONTENTS = 32

TABLES = ("events", "removed_events", "event_store")


class Removal(msgspec.Struct, frozen=True):
    """How an event's last life ended: its life number, its closing transition and when it was observed."""

    life: Annotated[int, msgspec.Meta(ge=1)]
    kind: str = TransitionKind.REMOVED
    at: UnixTime = 0.0


class _StoreRow(msgspec.Struct):
    """The store's own row of the state file."""

    incarnation: int | None
    last_look: UnixTime | None = None  # the last reconcile (a restart's gap in the view starts there)


class EventStore:
    """Lifecycle of every listed event. Not thread-safe for writers; readers get snapshots.

    EventIds are GUIDs and should never return once removed. If one does (an IMDS glitch that
    briefly listed nothing), its transitions were already emitted, so it starts a new *life*:
    its transitions carry the life number in their uid and stay unique. ``removed`` remembers
    the last life of recently removed EventIds for that.
    """

    def __init__(
        self,
        events: Mapping[str, EventState] | None = None,
        incarnation: int | None = None,
        removed: Mapping[str, Removal] | None = None,
        last_look: float | None = None,
    ):
        self._events: Mapping[str, EventState] = MappingProxyType(dict(events or {}))
        self.incarnation = incarnation
        self.removed: dict[str, Removal] = dict(removed or {})  # EventId -> how its last life ended, oldest first
        self.last_look = last_look  # wall time of the last reconcile (saved: a restart's gap begins there)
        self.state_version = 0  # bumped by every change worth saving (see durable.persistence)
        self._last_document: Document | None = None
        self._started_mono: dict[str, float] = {}  # EventId -> monotonic time its start was seen, this process

    @classmethod
    def from_rows(cls, tables: Tables) -> EventStore:
        """The store saved by ``rows``; raises a msgspec error if a row is damaged."""
        head = tables.get("event_store", {}).get("store")
        saved = decode_row(head, _StoreRow) if head is not None else _StoreRow(None)
        events = dict(
            sorted(
                ((key, _classified(decode_row(body, EventState))) for key, body in tables.get("events", {}).items()),
                key=lambda item: item[1].first_seen,
            )
        )
        removed = {key: decode_row(body, Removal) for key, body in tables.get("removed_events", {}).items()}
        return cls(
            events, saved.incarnation, dict(sorted(removed.items(), key=lambda item: item[1].at)), saved.last_look
        )

    def rows(self) -> dict[str, Mapping[str, object]]:
        return {
            "events": self._events,
            "removed_events": self.removed,
            "event_store": {"store": _StoreRow(self.incarnation, self.last_look)},
        }

    def removal(self, event_id: str) -> Removal | None:
        """How the last life of ``event_id`` ended, while it is remembered."""
        return self.removed.get(event_id)

    @property
    def events(self) -> Mapping[str, EventState]:
        """An immutable snapshot; replaced, never mutated, so scrapes need no lock."""
        return self._events

    def is_unchanged(self, document: Document) -> bool:
        """True when reconciling would change nothing (the common 1 Hz case)."""
        if document is self._last_document:  # the client hands back the same object for the same body
            return True
        if document.incarnation != self.incarnation or len(document.events) != len(self._events):
            return False
        return all((state := self._events.get(e.event_id)) is not None and state.event == e for e in document.events)

    def started_seconds(self, state: EventState, now: float, mono: float | None = None) -> float | None:
        """Time ``state``'s event has spent in Started: on the monotonic clock when its start was seen by this
        process, else from the saved wall-clock start; never negative."""
        if state.started_at is None:
            return None
        anchor = self._started_mono.get(state.event.event_id)
        if mono is not None and anchor is not None:
            return max(0.0, mono - anchor)
        return max(0.0, now - state.started_at)

    def reconcile(
        self,
        document: Document,
        now: float,
        *,
        mono: float | None = None,
        blind_since: float | None = None,
        keep_missing: bool = False,
    ) -> list[Transition]:
        """Adopt ``document`` as the current truth and return the transitions it implies. ``mono``: the
        monotonic clock now (durations); ``blind_since``: the caller's view had a gap since then;
        ``keep_missing``: an event the document does not list is kept as it was, not removed (IMDS may not
        list it yet: Scheduled Events enabled again after a day without requests, poller.loop.ViewGaps)."""
        transitions: list[Transition] = []
        updated: dict[str, EventState] = {}
        incarnation = document.incarnation
        watching = self.last_look is not None and blind_since is None  # not a first look, not after a gap
        for event in document.events:
            previous = self._events.get(event.event_id)
            if previous is not None and previous.event == event:  # most events of a changed document
                updated[event.event_id] = previous
                continue
            if previous is None:  # a returning EventId starts its next life (see the class docstring)
                gone = self.removed.pop(event.event_id, None)
                life = gone.life + 1 if gone is not None else 1
                state, emitted = _first_sighting(event, now, life=life, watching=watching)
            else:
                state, emitted = _advance(previous, event, now)
            updated[event.event_id] = state
            if mono is not None and state.started_at == now and event.event_id not in self._started_mono:
                self._started_mono[event.event_id] = mono  # its start seen now, by this process
            transitions += [
                _transition(kind, state, prev, now, incarnation, changes=changes) for kind, prev, changes in emitted
            ]
        for event_id, state in self._events.items():
            if event_id in updated:
                continue
            if keep_missing:  # after the listed ones: the document's events stay first, in its order
                updated[event_id] = state
                continue
            removal = self._removal(state, now, incarnation, mono, blind_since)
            self._forget(event_id, Removal(state.life, removal.kind, now))
            transitions.append(removal)
        self._events = MappingProxyType(updated)
        self.incarnation = incarnation
        self.last_look = now
        self._last_document = document
        self.state_version += 1
        return transitions

    def _removal(
        self, state: EventState, now: float, incarnation: int, mono: float | None, blind_since: float | None
    ) -> Transition:
        """The transition of a listed event gone now (see the module's docstring for what was not seen)."""
        previous = state.event.event_status
        if state.started_at is not None:
            seconds = self.started_seconds(state, now, mono)
            self._started_mono.pop(state.event.event_id, None)
            kind, flags = TransitionKind.COMPLETED, {"started_seconds": seconds, "started_observed": True}
        elif previous == SCHEDULED:
            not_before = state.event.not_before.timestamp() if state.event.not_before is not None else None
            watched_until = now if blind_since is None else blind_since
            if not_before is not None and watched_until < not_before <= now:  # it passed while nobody looked
                kind, flags = TransitionKind.COMPLETED, {"started_observed": False}
            else:
                observed = not_before is not None and not_before <= watched_until
                kind, flags = TransitionKind.CANCELLED, {"observed_until_not_before": observed}
        else:  # gone from Advisory or another status, never Started: the lifecycle closes all the same
            kind, flags = TransitionKind.REMOVED, {}
        return msgspec.structs.replace(_transition(kind, state, previous, now, incarnation), **flags)

    def _forget(self, event_id: str, removal: Removal) -> None:
        self.removed[event_id] = removal
        while len(self.removed) > MAX_REMEMBERED_REMOVALS:
            del self.removed[next(iter(self.removed))]


Emitted = list[tuple[TransitionKind, str, str]]  # (transition, previous status, what changed: on "updated")


def _advance(state: EventState, event: ScheduledEvent, now: float) -> tuple[EventState, Emitted]:
    """The new state of an event listed before and the transitions it emits."""
    emitted: Emitted = []
    previous = state.event.event_status
    history = state.not_before_history
    started_at = state.started_at
    starts = started_at is None and event.event_status == STARTED  # from Scheduled, or from any other status
    if starts:
        started_at = now
        emitted.append((TransitionKind.STARTED, previous, ""))
    elif started_at is None and (not_before := _new_not_before(event, history)) is not None:
        if history:  # a first NotBefore for an event seen without one is not a reschedule
            emitted.append((TransitionKind.RESCHEDULED, previous, ""))
        history = (*history, not_before)[-MAX_NOT_BEFORE_HISTORY:]
    updated = state.updated_contents
    if _changed_in_place(state.event, event, starts) and (key := content_key(event)) not in updated:
        # the same EventId now says another thing: a transition of its own, or the trail would lie
        changes = describe_change(state.event, event, with_not_before=False, with_status=not starts)
        emitted.append((TransitionKind.UPDATED, previous, changes))
        updated = (*updated, key)[-MAX_UPDATED_CONTENTS:]
    state = msgspec.structs.replace(
        state, event=event, started_at=started_at, not_before_history=history, updated_contents=updated
    )
    return _classified(state), emitted


def _new_not_before(event: ScheduledEvent, history: tuple[datetime, ...]) -> datetime | None:
    """The NotBefore of a Scheduled ``event`` when not seen before, else None."""
    if event.event_status == SCHEDULED and event.not_before is not None and event.not_before not in history:
        return event.not_before
    return None


def _changed_in_place(before: ScheduledEvent, after: ScheduledEvent, starts: bool) -> bool:
    """Another content, or a status change that is not this event's start (which has a transition of its own)."""
    return content(before) != content(after) or (not starts and status_changed(before, after))


def _first_sighting(
    event: ScheduledEvent, now: float, life: int = 1, *, watching: bool = True
) -> tuple[EventState, Emitted]:
    if event.event_status == STARTED:
        state = EventState(event, now, STARTED, started_at=now, life=life, first_seen_watched=watching)
        emitted = [(TransitionKind.STARTED, "", "")]
    elif event.event_status == SCHEDULED:
        history = (event.not_before,) if event.not_before is not None else ()
        state = EventState(event, now, SCHEDULED, not_before_history=history, life=life)
        emitted = [(TransitionKind.SCHEDULED, "", "")]
    else:  # Advisory (a Spot eviction-risk notice), or a status Azure adds: its lifecycle opens all the same
        state = EventState(event, now, event.event_status, life=life)
        emitted = [(TransitionKind.LISTED, "", "")]
    return _classified(state), emitted


def _classified(state: EventState) -> EventState:
    appeared_started = state.first_seen_status == STARTED and state.first_seen_watched
    impact, cause = classify(state.event, appeared_started=appeared_started)
    return msgspec.structs.replace(state, impact=impact, cause=cause)


def _transition(
    kind: TransitionKind, state: EventState, previous: str, now: float, incarnation: int, *, changes: str = ""
) -> Transition:
    return Transition(
        kind=kind,
        event=state.event,
        previous_status=previous,
        observed_at=now,
        document_incarnation=incarnation,
        first_seen=state.first_seen,
        first_seen_status=state.first_seen_status,
        life=state.life,
        impact=state.impact,
        cause=state.cause,
        changes=changes,
    )
