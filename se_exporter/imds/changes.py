"""What changed in an event listed again under the same EventId (for the audit trail and the approver)."""

from __future__ import annotations

from datetime import datetime

from se_exporter.imds.document import ScheduledEvent

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


def describe_change(before: ScheduledEvent, after: ScheduledEvent, *, with_not_before: bool = True) -> str:
    """``the event changed (EventType Freeze -> Reboot; Resources [vm-a] -> [vm-a, vm-b])``, values shortened."""
    fields = _ALL_FIELDS if with_not_before else CONTENT_FIELDS
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
