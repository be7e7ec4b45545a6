"""The event store: a pure state machine from IMDS documents to lifecycle transitions.

``reconcile(document, now)`` compares a document with what the store last saw and returns the
transitions of DESIGN.md. It performs no I/O and reads no clock: callers pass ``now`` (Unix
seconds), so tests drive it with any timeline and a restored store continues where it left off.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from types import MappingProxyType

from se_exporter.imds.document import STATUS_SCHEDULED, STATUS_STARTED, Document, ScheduledEvent

SCHEDULED = "scheduled"
STARTED = "started"
COMPLETED = "completed"
CANCELLED = "cancelled"
RESCHEDULED = "rescheduled"
TRANSITIONS = (SCHEDULED, STARTED, COMPLETED, CANCELLED, RESCHEDULED)

MAX_REMEMBERED_REMOVALS = 1000

# Fixed namespace so that a transition's uid is the same in every process, forever.
_UID_NAMESPACE = uuid.UUID("6f1d3c52-5a57-4d0e-9a35-9b1f2b8c1e01")


@dataclass(frozen=True, slots=True)
class EventState:
    """What the store knows of one listed event."""

    event: ScheduledEvent  # as last seen
    first_seen: float  # Unix time of the first sighting
    first_seen_status: str
    started_at: float | None = None  # Unix time the exporter saw it Started
    not_before_history: tuple[datetime, ...] = ()  # every NotBefore seen while Scheduled
    life: int = 1  # > 1 when the EventId came back after its removal (see EventStore)

    def started_seconds(self, now: float) -> float | None:
        return None if self.started_at is None else max(0.0, now - self.started_at)


@dataclass(frozen=True, slots=True)
class Transition:
    kind: str  # one of TRANSITIONS
    event: ScheduledEvent  # the event as seen at the transition (last seen, for removals)
    previous_status: str  # "" when first seen
    observed_at: float  # Unix time the exporter observed the change
    document_incarnation: int
    first_seen: float
    started_seconds: float | None = None  # time spent in Started, on "completed"
    life: int = 1

    @property
    def uid(self) -> str:
        """Stable id of this transition: the same if it is ever emitted again after a crash."""
        not_before = self.event.not_before if self.kind == RESCHEDULED else None
        return _transition_uid(self.event.event_id, self.life, self.kind, not_before)


@functools.lru_cache(maxsize=4096)  # each sink asks for the uid of the same transition
def _transition_uid(event_id: str, life: int, kind: str, not_before: datetime | None) -> str:
    key = event_id if life == 1 else f"{event_id}#{life}"
    key += f"/{kind}"
    if not_before is not None:
        key += "/" + not_before.isoformat()
    return str(uuid.uuid5(_UID_NAMESPACE, key))


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
        removed: Mapping[str, int] | None = None,
    ):
        self._events: Mapping[str, EventState] = MappingProxyType(dict(events or {}))
        self.incarnation = incarnation
        self.removed: dict[str, int] = dict(removed or {})  # EventId -> last life, oldest first
        self._last_document: Document | None = None

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
        return all(
            (state := self._events.get(e.event_id)) is not None and state.event == e for e in document.events
        )

    def reconcile(self, document: Document, now: float) -> list[Transition]:
        """Adopt ``document`` as the current truth and return the transitions it implies."""
        transitions: list[Transition] = []
        updated: dict[str, EventState] = {}
        for event in document.events:
            previous = self._events.get(event.event_id)
            if previous is None:  # a returning EventId starts its next life (see the class docstring)
                state, emitted = _first_sighting(event, now, life=self.removed.pop(event.event_id, 0) + 1)
            else:
                state, emitted = _advance(previous, event, now)
            updated[event.event_id] = state
            transitions += [_transition(kind, state, prev, now, document.incarnation) for kind, prev in emitted]
        for event_id, state in self._events.items():
            if event_id in updated:
                continue
            self._forget(event_id, state.life)
            if (kind := _removal(state)) is not None:
                transitions.append(_transition(kind, state, state.event.event_status, now, document.incarnation))
        self._events = MappingProxyType(updated)
        self.incarnation = document.incarnation
        self._last_document = document
        return transitions

    def _forget(self, event_id: str, life: int) -> None:
        self.removed[event_id] = life
        while len(self.removed) > MAX_REMEMBERED_REMOVALS:
            del self.removed[next(iter(self.removed))]


def _advance(state: EventState, event: ScheduledEvent, now: float) -> tuple[EventState, list[tuple[str, str]]]:
    """The new state of an event listed before and the (transition, previous status) pairs it emits."""
    emitted: list[tuple[str, str]] = []
    previous = state.event.event_status
    history = state.not_before_history
    started_at = state.started_at
    if started_at is not None:  # once Started, the lifecycle only waits for the removal
        pass
    elif event.event_status == STATUS_STARTED:
        started_at = now
        emitted.append((STARTED, previous))
    elif (
        event.event_status == STATUS_SCHEDULED
        and event.not_before is not None
        and event.not_before not in history
    ):
        if history:  # a first NotBefore for an event seen without one is not a reschedule
            emitted.append((RESCHEDULED, previous))
        history = (*history, event.not_before)
    return replace(state, event=event, started_at=started_at, not_before_history=history), emitted


def _first_sighting(
    event: ScheduledEvent, now: float, life: int = 1
) -> tuple[EventState, list[tuple[str, str]]]:
    state = EventState(event=event, first_seen=now, first_seen_status=event.event_status, life=life)
    if event.event_status == STATUS_STARTED:
        return replace(state, started_at=now), [(STARTED, "")]
    if event.event_status == STATUS_SCHEDULED:
        history = (event.not_before,) if event.not_before is not None else ()
        return replace(state, not_before_history=history), [(SCHEDULED, "")]
    return state, []  # an unknown status: tracked, and shown in metrics, but no lifecycle step


def _removal(state: EventState) -> str | None:
    if state.started_at is not None:
        return COMPLETED
    if state.event.event_status == STATUS_SCHEDULED:
        return CANCELLED
    return None


def _transition(kind: str, state: EventState, previous: str, now: float, incarnation: int) -> Transition:
    return Transition(
        kind=kind,
        event=state.event,
        previous_status=previous,
        observed_at=now,
        document_incarnation=incarnation,
        first_seen=state.first_seen,
        started_seconds=state.started_seconds(now) if kind == COMPLETED else None,
        life=state.life,
    )
