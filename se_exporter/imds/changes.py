"""What changed in an event listed again under the same EventId (for the audit trail and the approver)."""

from __future__ import annotations

from datetime import datetime

from se_exporter.imds.document import SCHEDULED, STARTED, ScheduledEvent

# The fields that say what an event is, beside its status and NotBefore (whose changes have names of their
# own: started, rescheduled). IMDS's names, for people reading the audit trail.
CONTENT_FIELDS = (
    ("EventType", "event_type"),
    ("ResourceType", "resource_type"),
    ("Resources", "resources"),
    ("EventSource", "event_source"),
    ("DurationInSeconds", "duration_seconds"),
    ("Description", "description"),
)
_ALL_FIELDS = (*CONTENT_FIELDS[:3], ("NotBefore", "not_before"), *CONTENT_FIELDS[3:])


def content(event: ScheduledEvent) -> tuple[object, ...]:
    """What the event is, apart from its status and NotBefore."""
    return tuple(getattr(event, attr) for _, attr in CONTENT_FIELDS)


def status_changed(before: ScheduledEvent, after: ScheduledEvent) -> bool:
    """Whether the EventStatus changed other than by a start (Scheduled -> Started has a transition of its own;
    Scheduled -> Paused, Advisory -> Scheduled or Started -> Scheduled do not)."""
    return before.event_status != after.event_status and (before.event_status, after.event_status) != (
        SCHEDULED,
        STARTED,
    )


def describe_change(
    before: ScheduledEvent, after: ScheduledEvent, *, with_not_before: bool = True, with_status: bool = False
) -> str:
    """``the event changed (EventType Freeze -> Reboot; Resources [vm-a] -> [vm-a, vm-b])``, values shortened;
    ``with_status``: EventStatus too, when it changed other than by a start."""
    fields = _ALL_FIELDS if with_not_before else CONTENT_FIELDS
    if with_status and status_changed(before, after):
        fields = (("EventStatus", "event_status"), *fields)
    changes = [
        f"{name} {_short(getattr(before, attr))} -> {_short(getattr(after, attr))}"
        for name, attr in fields
        if getattr(before, attr) != getattr(after, attr)
    ]
    return "the event changed (" + ("; ".join(changes) or "nothing visible") + ")"


def _short(value: object, limit: int = 60) -> str:
    if isinstance(value, tuple):
        text = "[" + ", ".join(value[:5]) + (f", and {len(value) - 5} more" if len(value) > 5 else "") + "]"
    elif isinstance(value, datetime):
        text = value.strftime("%Y-%m-%dT%H:%M:%SZ")
    else:
        text = str(value) if value not in (None, "") else "(none)"
    return text if len(text) <= limit else text[: limit - 1] + "…"
