"""One span per Scheduled Event lifecycle, from first sighting to removal (OTel API only).

A span cannot be kept open across a restart, so none is open: each transition is remembered (and
saved in the state file, a row per open lifecycle in ``open_spans``), and when the event is removed the
whole span is recorded at once with its real start (first sighting), end (removal) and one span event per
transition at the time it was observed. A restart therefore keeps the original start time.
The span is a root span (its own trace) linked to the poll that saw the removal.

A lifecycle whose event ended while OpenTelemetry was off (a run without it in between) is ended at the
first poll after: with the closing transition and time the event store remembers (``removal``), else as
``removed`` at that poll.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Annotated, Any

import msgspec
from opentelemetry import trace
from opentelemetry.context import Context

from se_exporter.common.times import rfc3339, unix_nanos
from se_exporter.durable.persistence import Tables, decode_row
from se_exporter.imds.document import MAX_EVENTS, VMIdentity
from se_exporter.lifecycle.machine import Removal
from se_exporter.lifecycle.transitions import CLOSING, Transition, TransitionKind, transition_uid
from se_exporter.poller import PollResult

log = logging.getLogger(__name__)
SPAN_NAME = "scheduled_event.lifecycle"
# Outcome of an event that vanished without a closing transition (a lifecycle restored from a state file of a
# release before every status had one): the same word as the "removed" transition.
REMOVED = TransitionKind.REMOVED
MAX_OPEN = MAX_EVENTS  # as many as a document may list
# Span events kept per lifecycle: the first ones and the newest (an event rescheduled every poll would
# otherwise grow the state file by a step per poll, each one rewritten at every change). A lifecycle
# has three steps, four or five with a reschedule: eight keep every real one, and bound the state file.
MAX_STEPS = 8


_UnixTime = Annotated[float, msgspec.Meta(ge=0, le=1e11)]


class _Step(msgspec.Struct):
    kind: str
    at: _UnixTime
    status: str
    previous_status: str
    incarnation: int
    not_before: str | None
    uid: str


class _Lifecycle(msgspec.Struct):
    first_seen: _UnixTime
    life: Annotated[int, msgspec.Meta(ge=1)]
    steps: list[_Step] = []


TABLES = ("open_spans",)
Removals = Callable[[str], Removal | None]  # how an event's last life ended (the event store's)


class LifecycleSpans:
    """A poll sink; ``rows``/``from_rows`` carry the open lifecycles across restarts."""

    def __init__(
        self,
        tracer: trace.Tracer,
        removal: Removals = lambda _event_id: None,
        open_lifecycles: dict[str, _Lifecycle] | None = None,
    ) -> None:
        self._tracer = tracer
        self._removal = removal
        self._open = open_lifecycles or {}
        self._restored = bool(self._open)  # the first poll ends those whose event ended meanwhile
        self.state_version = 0

    @classmethod
    def from_rows(cls, tracer: trace.Tracer, removal: Removals, tables: Tables) -> LifecycleSpans:
        """The open lifecycles saved by ``rows``; raises a msgspec error if a row is damaged."""
        saved = {key: decode_row(body, _Lifecycle) for key, body in tables.get("open_spans", {}).items()}
        return cls(tracer, removal, dict(sorted(saved.items(), key=lambda item: item[1].first_seen)))

    def rows(self) -> dict[str, dict[str, _Lifecycle]]:
        return {"open_spans": self._open}

    def on_poll(self, result: PollResult) -> None:
        if result.transitions or result.changed or self._restored:
            self.state_version += 1
        for transition in result.transitions:
            self._record(transition, result.identity)
        if result.changed or self._restored:  # anything still open but no longer listed ended unseen by us
            self._restored = False
            listed = {event.event_id for event in result.document.events}
            for event_id in [key for key in self._open if key not in listed]:
                self._end_unseen(event_id, self._open.pop(event_id), result)
        while len(self._open) > MAX_OPEN:
            self._open.pop(next(iter(self._open)))

    def _end_unseen(self, event_id: str, entry: _Lifecycle, result: PollResult) -> None:
        """A lifecycle whose closing transition this sink did not see: the store's word on how it ended."""
        removal = self._removal(event_id)
        if removal is None or removal.life != entry.life:
            self._emit(event_id, entry, None, outcome=REMOVED, end=result.now, identity=result.identity)
            return
        status = entry.steps[-1].status if entry.steps else ""
        uid = transition_uid(event_id, removal.life, TransitionKind(removal.kind), None)
        entry.steps.append(_Step(removal.kind, removal.at, "", status, 0, None, uid))
        self._emit(event_id, entry, None, outcome=removal.kind, end=removal.at, identity=result.identity)

    def _record(self, transition: Transition, identity: VMIdentity) -> None:
        event = transition.event
        entry = self._open.get(event.event_id)
        if entry is None or entry.life != transition.life:
            entry = self._open[event.event_id] = _Lifecycle(transition.first_seen, transition.life)
        if all(step.uid != transition.uid for step in entry.steps):  # re-emitted after a crash: once
            entry.steps.append(
                _Step(
                    transition.kind,
                    transition.observed_at,
                    event.event_status,
                    transition.previous_status,
                    transition.document_incarnation,
                    rfc3339(event.not_before) if event.not_before else None,
                    transition.uid,
                )
            )
            if len(entry.steps) > MAX_STEPS:  # keep how it began and how it went lately
                del entry.steps[MAX_STEPS // 2]
        if transition.kind in CLOSING:
            del self._open[event.event_id]
            entry.first_seen = transition.first_seen  # the store's, which survived any restart
            self._emit(
                event.event_id,
                entry,
                transition,
                outcome=transition.kind,
                end=transition.observed_at,
                identity=identity,
            )

    def _emit(
        self,
        event_id: str,
        entry: _Lifecycle,
        last: Transition | None,
        *,
        outcome: str,
        end: float,
        identity: VMIdentity,
    ) -> None:
        attributes: dict[str, Any] = {"scheduled_event.id": event_id, "scheduled_event.outcome": outcome}
        if last is not None:
            event = last.event
            attributes |= {
                "scheduled_event.type": event.event_type,
                "scheduled_event.source": event.event_source,
                "scheduled_event.resource_type": event.resource_type,
                "scheduled_event.resources": list(event.resources),
                "scheduled_event.duration_s": event.duration_seconds,
                "scheduled_event.description": event.description,
                "scheduled_event.impact": last.impact,
                "scheduled_event.cause": last.cause,
            }
            if (affects := identity.affects(event.resources)) is not None:
                attributes["scheduled_event.affects_this_vm"] = affects
        poll = trace.get_current_span().get_span_context()
        span = self._tracer.start_span(
            SPAN_NAME,
            context=Context(),
            start_time=unix_nanos(entry.first_seen),
            attributes=attributes,
            links=[trace.Link(poll)] if poll.is_valid else None,
        )
        for step in entry.steps:
            step_attributes: dict[str, Any] = {
                "scheduled_event.transition": step.kind,
                "scheduled_event.status": step.status,
                "scheduled_event.previous_status": step.previous_status,
                "scheduled_event.document_incarnation": step.incarnation,
                "log.record.uid": step.uid,
            }
            if step.not_before:
                step_attributes["scheduled_event.not_before"] = step.not_before
            span.add_event(step.kind, step_attributes, timestamp=unix_nanos(step.at))
        span.end(end_time=unix_nanos(max(end, entry.first_seen)))
