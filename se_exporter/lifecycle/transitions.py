"""What the event store says of events: each listed event's state, and the transitions between states.

Plain immutable values (msgspec structs), shared by the store that makes them and every sink that reads
them; a transition's ``uid`` is stable across processes, so a crash never gives one event two ids.
"""

from __future__ import annotations

import functools
import hashlib
import json
import uuid
from datetime import datetime
from enum import StrEnum
from typing import Annotated

import msgspec

from se_exporter.imds.document import SCHEDULED, ScheduledEvent, content
from se_exporter.imds.impact import Cause, Impact

# Fixed namespace so that a transition's uid is the same in every process, forever.
_UID_NAMESPACE = uuid.UUID("6f1d3c52-5a57-4d0e-9a35-9b1f2b8c1e01")
UnixTime = Annotated[float, msgspec.Meta(ge=0, le=1e11)]  # keeps a damaged state file's times usable


class TransitionKind(StrEnum):
    SCHEDULED = "scheduled"  # first seen Scheduled
    STARTED = "started"  # Scheduled -> Started, first seen Started, or Started at last from any other status
    COMPLETED = "completed"  # removed after Started
    CANCELLED = "cancelled"  # removed while Scheduled
    RESCHEDULED = "rescheduled"  # NotBefore changed while Scheduled
    # Changed in place: type, Resources, source, duration, description (same EventId), or an EventStatus
    # change other than a start (Scheduled -> Paused, Advisory -> Scheduled, Started -> Scheduled).
    UPDATED = "updated"
    LISTED = "listed"  # first seen in any other status (Advisory: a Spot eviction-risk notice)
    REMOVED = "removed"  # removed from any other status, never Started


# The transitions that open a lifecycle, and those that close one: every listed event has both.
OPENING: frozenset[TransitionKind] = frozenset(
    {TransitionKind.SCHEDULED, TransitionKind.STARTED, TransitionKind.LISTED}
)
CLOSING: frozenset[TransitionKind] = frozenset(
    {TransitionKind.COMPLETED, TransitionKind.CANCELLED, TransitionKind.REMOVED}
)


class EventState(msgspec.Struct, frozen=True, gc=False):
    """What the store knows of one listed event."""

    event: ScheduledEvent  # as last seen
    first_seen: UnixTime  # Unix time of the first sighting
    first_seen_status: str
    started_at: UnixTime | None = None  # Unix time the exporter saw it Started
    not_before_history: tuple[datetime, ...] = ()  # every NotBefore seen while Scheduled
    # Every content "updated" said of it (``content_key``: its fields and, but for Scheduled, its status),
    # newest kept: "updated" is said once per new content. Empty in a state file written before it existed.
    updated_contents: tuple[str, ...] = ()
    life: Annotated[int, msgspec.Meta(ge=1)] = 1  # > 1 when the EventId came back after its removal
    # Whether the exporter was watching when it first saw the event (False at the first look after a start
    # without a state file, and after a gap in its view): an event found Started then may not have appeared
    # Started, and is no hardware failure by its status (imds.impact).
    first_seen_watched: bool = True
    # What the event will do and why (imds.impact): set whenever the event changes; a state file's
    # values are recomputed on load, so an event that appeared Started keeps the cause "failure".
    impact: Impact = Impact.UNKNOWN
    cause: Cause = Cause.UNKNOWN

    def started_seconds(self, now: float) -> float | None:
        return None if self.started_at is None else max(0.0, now - self.started_at)


class Transition(msgspec.Struct, frozen=True, gc=False):
    kind: TransitionKind
    event: ScheduledEvent  # the event as seen at the transition (last seen, for removals)
    previous_status: str  # "" when first seen
    observed_at: float  # Unix time the exporter observed the change
    document_incarnation: int
    first_seen: float
    first_seen_status: str
    started_seconds: float | None = None  # time spent in Started, on "completed" (None: its start was not seen)
    life: int = 1
    impact: Impact = Impact.UNKNOWN
    cause: Cause = Cause.UNKNOWN
    changes: str = ""  # on "updated": what changed (``imds.document.describe_change``)
    # On "completed": whether the exporter saw it Started (False: it was last seen Scheduled, and its NotBefore
    # passed while the exporter could not look). On "cancelled": whether it watched until the NotBefore.
    started_observed: bool | None = None
    observed_until_not_before: bool | None = None

    @property
    def uid(self) -> str:
        """Stable id of this transition: the same if it is ever emitted again after a crash (per new NotBefore
        for "rescheduled", per new content for "updated")."""
        not_before = (
            self.event.not_before.isoformat()
            if self.kind is TransitionKind.RESCHEDULED and self.event.not_before is not None
            else None
        )
        detail = content_key(self.event) if self.kind is TransitionKind.UPDATED else not_before
        return transition_uid(self.event.event_id, self.life, self.kind, detail)


@functools.lru_cache(maxsize=1024)  # each sink asks for the uid of the same transition
def transition_uid(event_id: str, life: int, kind: str, detail: str | None) -> str:
    key = event_id if life == 1 else f"{event_id}#{life}"
    key += f"/{kind}"
    if detail is not None:
        key += "/" + detail
    return str(uuid.uuid5(_UID_NAMESPACE, key))


def content_key(event: ScheduledEvent) -> str:
    """What the event says apart from its NotBefore, as a short digest: the uid detail of its "updated".

    A Scheduled event's key is its content alone, as every earlier version computed it (a receiver may hold
    those uids); in any other status the status is part of it, so Scheduled -> Paused is new content.
    """
    fields: tuple[object, ...] = content(event)
    if event.event_status != SCHEDULED:
        fields = (*fields, event.event_status)
    return hashlib.sha256(json.dumps(fields, default=str).encode()).hexdigest()[:16]
