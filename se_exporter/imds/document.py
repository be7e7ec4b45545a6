"""The Scheduled Events document: immutable types and a strict parser.

Unknown EventType/EventStatus values are kept as strings (Azure may add some); fields missing
in older api-versions get neutral defaults. Anything else malformed raises ``InvalidDocument``.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, TypeGuard

from se_exporter.errors import InvalidDocument

EVENT_TYPES = ("Freeze", "Reboot", "Redeploy", "Preempt", "Terminate")
STATUS_SCHEDULED = "Scheduled"
STATUS_STARTED = "Started"
EVENT_STATUSES = (STATUS_SCHEDULED, STATUS_STARTED)
UNKNOWN_DURATION = -1


@dataclass(frozen=True, slots=True)
class ScheduledEvent:
    event_id: str
    event_type: str
    event_status: str
    resource_type: str = "VirtualMachine"
    resources: tuple[str, ...] = ()
    not_before: datetime | None = None  # timezone-aware UTC; None once Started
    description: str = ""
    event_source: str = ""
    duration_seconds: int = UNKNOWN_DURATION


@dataclass(frozen=True, slots=True)
class Document:
    incarnation: int
    events: tuple[ScheduledEvent, ...] = ()


def parse_document(body: bytes | str) -> Document:
    """Parse an IMDS answer; raise ``InvalidDocument`` saying what is wrong."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise InvalidDocument(f"body is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise InvalidDocument(f"document is a JSON {type(data).__name__}, not an object")
    incarnation = data.get("DocumentIncarnation")
    if not is_int(incarnation):
        raise InvalidDocument(f"DocumentIncarnation must be an integer, got {incarnation!r:.80}")
    raw_events = data.get("Events", [])
    if not isinstance(raw_events, list):
        raise InvalidDocument("Events must be a list")
    events = tuple(_parse_event(i, raw) for i, raw in enumerate(raw_events))
    seen: set[str] = set()
    for event in events:
        if event.event_id in seen:
            raise InvalidDocument(f"EventId {event.event_id!r:.80} is listed twice")
        seen.add(event.event_id)
    return Document(incarnation=incarnation, events=events)


def _parse_event(index: int, raw: Any) -> ScheduledEvent:
    where = f"Events[{index}]"
    if not isinstance(raw, dict):
        raise InvalidDocument(f"{where} is not an object")
    event_id = _required_str(raw, "EventId", where)
    where = f"{where} ({event_id:.64})"
    resources = raw.get("Resources", [])
    if not isinstance(resources, list) or not all(isinstance(r, str) for r in resources):
        raise InvalidDocument(f"{where}.Resources must be a list of strings")
    for resource in resources:
        _check_unicode(resource, f"{where}.Resources")
    duration = raw.get("DurationInSeconds", UNKNOWN_DURATION)
    if not is_int(duration):
        raise InvalidDocument(f"{where}.DurationInSeconds must be an integer, got {duration!r:.40}")
    return ScheduledEvent(
        event_id=event_id,
        event_type=_required_str(raw, "EventType", where),
        event_status=_required_str(raw, "EventStatus", where),
        resource_type=_optional_str(raw, "ResourceType", where) or "VirtualMachine",
        resources=tuple(resources),
        not_before=parse_not_before(_optional_str(raw, "NotBefore", where), where),
        description=_optional_str(raw, "Description", where),
        event_source=_optional_str(raw, "EventSource", where),
        duration_seconds=duration,
    )


def parse_not_before(text: str, where: str = "NotBefore") -> datetime | None:
    """RFC 1123 as IMDS sends it, or ISO 8601 as Microsoft's mock server does; "" means none."""
    text = text.strip()
    if not text:
        return None
    try:
        return _parse_time(text)
    # OverflowError: a zone offset that moves a date beyond year 1..9999 (e.g. 9999-12-31T23:59-01:00)
    except (ValueError, TypeError, IndexError, OverflowError):
        raise InvalidDocument(f"{where}.NotBefore is neither RFC 1123 nor ISO 8601: {text!r:.80}") from None


@functools.lru_cache(maxsize=4096)  # the same few NotBefore strings come back every poll
def _parse_time(text: str) -> datetime:
    parsed = datetime.fromisoformat(text) if text[:4].isdigit() else parsedate_to_datetime(text)
    if parsed.tzinfo is None:  # IMDS times are UTC even when the zone is left out
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.astimezone(UTC)


def is_int(value: object) -> TypeGuard[int]:
    """An int that is not a bool (JSON's true/false parse as bool, a subclass of int)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _check_unicode(value: str, where: str) -> str:
    """JSON's \\ud800 escapes can smuggle lone surrogates in: no UTF-8 label, log line or uid can carry them."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidDocument(f"{where} is not valid Unicode (lone surrogate): {value!r:.80}") from None
    return value


def _required_str(raw: dict[str, Any], key: str, where: str) -> str:
    value = raw.get(key)
    if not isinstance(value, str) or not value:
        raise InvalidDocument(f"{where}.{key} must be a non-empty string, got {value!r:.80}")
    return _check_unicode(value, f"{where}.{key}")


def _optional_str(raw: dict[str, Any], key: str, where: str) -> str:
    value = raw.get(key, "")
    if value is None:
        return ""
    if not isinstance(value, str):
        raise InvalidDocument(f"{where}.{key} must be a string, got {value!r:.80}")
    return _check_unicode(value, f"{where}.{key}")
