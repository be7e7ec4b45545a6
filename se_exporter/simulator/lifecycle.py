"""Event lifecycle on a timeline: the mechanics behind :class:`~se_exporter.simulator.world.SimWorld`.

Lifecycle (as Microsoft documents it): an event appears Scheduled with a NotBefore, or directly
Started (hardware failure). Scheduled becomes Started when approved (POST StartRequests), when
started by someone else, or when NotBefore passes. A Started event disappears after its
``started_for`` (completed); a Scheduled event that disappears was cancelled. A reschedule moves
NotBefore while Scheduled. A Spot eviction-risk notice appears ``Advisory`` and only disappears, after
its ``listed_for`` (removed).

Everything the future holds sits on one timeline ordered by simulated time. :meth:`Lifecycle.advance`
applies every due action in order, each at the instant it was due, so a clock that jumped ahead
(acceleration, a test advancing by hand) produces the same history as one that ticked finely.
Actions overtaken by events (a NotBefore start after an approval or a reschedule) are dropped.

DocumentIncarnation goes up by one per *batch*: all changes at one simulated instant of the
timeline, or one call from outside (an approval POST, an API call). A client therefore sees a new
value whenever the document changed.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field

from se_exporter.simulator.clock import Clock, format_rfc1123
from se_exporter.simulator.model import SCHEDULED, SELF, STARTED, EventPlan, SimEvent
from se_exporter.simulator.truth import Change, GroundTruth


@dataclass(order=True)
class Action:
    due: float
    seq: int
    kind: str = field(compare=False)  # appear | start | cancel | complete | reschedule | remove
    event_id: str = field(compare=False)
    reason: str = field(compare=False, default="scenario")
    plan: EventPlan | None = field(compare=False, default=None)
    # "start" by NotBefore, "reschedule": the NotBefore it is about; "complete": started_at.
    marker: float | None = field(compare=False, default=None)


class Lifecycle:
    """Events, timeline and incarnation. Not thread-safe: the world locks around every call."""

    def __init__(
        self,
        vm_name: str,
        clock: Clock,
        truth: GroundTruth,
        incarnation: int,
        on_removed: Callable[[str, float], None],
    ) -> None:
        self.events: dict[str, SimEvent] = {}  # document order = order of appearance
        self.incarnation = incarnation
        self._vm_name = vm_name
        self._clock = clock
        self._truth = truth
        self._on_removed = on_removed
        self._timeline: list[Action] = []
        self._seq = 0
        self._bumped = False

    def new_batch(self) -> None:
        """The next change starts a new DocumentIncarnation."""
        self._bumped = False

    def push(
        self,
        due: float,
        kind: str,
        event_id: str,
        *,
        reason: str = "scenario",
        plan: EventPlan | None = None,
        marker: float | None = None,
    ) -> None:
        self._seq += 1  # ties at one instant keep insertion order
        heapq.heappush(self._timeline, Action(due, self._seq, kind, event_id, reason, plan, marker))

    def advance(self, now: float) -> list[Change]:
        """Apply every action due by ``now``, in time order."""
        applied: list[Change] = []
        batch_due: float | None = None
        while self._timeline and self._timeline[0].due <= now:
            action = heapq.heappop(self._timeline)
            if action.due != batch_due:
                self._bumped, batch_due = False, action.due
            change = self.apply(action)
            if change is not None:
                applied.append(change)
        return applied

    def apply(self, action: Action) -> Change | None:
        """Apply one action if it still makes sense."""
        if action.kind == "appear":
            if action.plan is None:  # every "appear" action is made with its plan (Lifecycle.schedule)
                raise ValueError(f"an appear action for {action.event_id} has no event plan")
            return self._appear(action.event_id, action.plan, action.due, action.reason)
        event = self.events.get(action.event_id)
        if event is None:
            return None
        if event.status == SCHEDULED:
            return self._apply_to_scheduled(event, action)
        if event.status != STARTED:  # Advisory: it only goes
            return self._remove(event, action.due, "removed") if action.kind == "remove" else None
        if action.kind == "complete" and (action.reason == "manual" or action.marker == event.started_at):
            return self._remove(event, action.due, "completed")
        return None

    def _apply_to_scheduled(self, event: SimEvent, action: Action) -> Change | None:
        # A NotBefore start is stale once the event was rescheduled: the marker tells.
        if action.kind == "start" and (action.reason != "not_before" or action.marker == event.not_before):
            return self.start(event, action.due, action.reason)
        if action.kind == "cancel":
            return self._remove(event, action.due, "cancelled")
        if action.kind == "reschedule" and action.marker is not None:
            return self.reschedule(event, action.due, action.marker, action.reason)
        return None

    def _appear(self, event_id: str, plan: EventPlan, at: float, reason: str) -> Change:
        resources = tuple(self._vm_name if r == SELF else r for r in plan.resources)
        event = SimEvent(event_id, plan, resources, SCHEDULED, None, at)
        self.events[event_id] = event
        if plan.status != SCHEDULED:  # listed as it is (Advisory) until it goes
            event.status = plan.status
            self.push(at + plan.listed_for, "remove", event_id)
            return self.record("appeared", reason, event, None, at)
        if plan.notice is None:
            return self.start(event, at, reason, kind="appeared")
        event.not_before = at + plan.notice
        self.push(event.not_before, "start", event_id, reason="not_before", marker=event.not_before)
        return self.record("appeared", reason, event, None, at)

    def start(self, event: SimEvent, at: float, reason: str, kind: str = "started") -> Change:
        previous = None if kind == "appeared" else event.status
        event.status, event.not_before, event.started_at = STARTED, None, at
        self.push(at + event.plan.started_for, "complete", event.event_id, marker=at)
        return self.record(kind, reason, event, previous, at)

    def reschedule(self, event: SimEvent, at: float, not_before: float, reason: str) -> Change | None:
        if not_before == event.not_before:
            return None
        event.not_before = not_before
        self.push(not_before, "start", event.event_id, reason="not_before", marker=not_before)
        return self.record("rescheduled", reason, event, SCHEDULED, at)

    def _remove(self, event: SimEvent, at: float, reason: str) -> Change:
        del self.events[event.event_id]
        change = self.record("removed", reason, event, event.status, at)
        self._on_removed(event.event_id, at)
        return change

    def reset_incarnation(self, value: int, reason: str, at: float) -> Change:
        """DocumentIncarnation set back (as IMDS does after 24 h without requests), recorded without a bump."""
        self.incarnation = value
        return self.record("incarnation_reset", reason, None, None, at, bump=False)

    def record(
        self, kind: str, reason: str, event: SimEvent | None, previous: str | None, at: float, *, bump: bool = True
    ) -> Change:
        """Write a change to the ground truth (bumping the incarnation once per batch, unless ``bump`` is False)."""
        if bump and not self._bumped:
            self.incarnation += 1
            self._bumped = True
        clock = self._clock
        nb = event.not_before if event is not None else None
        return self._truth.add(
            lambda seq: Change(
                seq=seq,
                kind=kind,
                reason=reason,
                event_id=event.event_id if event else None,
                event_type=event.plan.event_type if event else None,
                status=None if event is None or kind == "removed" else event.status,
                previous_status=previous,
                not_before="" if nb is None else format_rfc1123(clock.to_real_time(nb)),
                not_before_sim=nb,
                incarnation=self.incarnation,
                sim_time=at,
                real_time=clock.real_time(),
                real_monotonic=clock.real_monotonic(),
            )
        )
