"""The IMDS documents: the Scheduled Events document and the compute metadata (this VM's identity, or
``--vm.name``), as immutable types from strict decoders.

The JSON is decoded by msgspec into wire types that say exactly what IMDS may send (and nothing
more is accepted), then turned into ``ScheduledEvent``s with neutral defaults for the fields older
api-versions leave out. Unknown EventType/EventStatus values are kept as strings (Azure may add
some); anything else malformed raises ``InvalidDocument``, which the poll loop counts and survives.

``content`` and ``describe_change`` say what changed in an event listed again under the same EventId (for the
audit trail and the approver).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Annotated, Literal, get_args

import msgspec

from se_exporter.errors import InvalidDocument

# The EventTypes an approval can start (POST StartRequests), and every EventType Azure documents: a Spot
# eviction-risk notice (preview, with a newer api-version) is listed like an event, but acknowledging one does
# nothing, so no approval rule names it. Any other value is kept as it comes (Azure adds types).
ApprovableEventTypeName = Literal["Freeze", "Reboot", "Redeploy", "Preempt", "Terminate"]
APPROVABLE_EVENT_TYPES: tuple[str, ...] = get_args(ApprovableEventTypeName)
SPOT_REBALANCE_RECOMMENDATION = "SpotRebalanceRecommendation"
EventTypeName = Literal[ApprovableEventTypeName, "SpotRebalanceRecommendation"]
EVENT_TYPES: tuple[str, ...] = (*APPROVABLE_EVENT_TYPES, SPOT_REBALANCE_RECOMMENDATION)
EventSourceName = Literal["Platform", "User"]
EVENT_SOURCES: tuple[str, ...] = get_args(EventSourceName)
SCHEDULED = "Scheduled"
STARTED = "Started"
ADVISORY = "Advisory"  # a Spot eviction-risk notice's status: nothing will start
EVENT_STATUSES = (SCHEDULED, STARTED)


# The type and status pairs Azure documents: the zero series of azure_scheduled_events_pending.
KNOWN_LISTINGS: tuple[tuple[str, str], ...] = (
    *((event_type, status) for event_type in APPROVABLE_EVENT_TYPES for status in EVENT_STATUSES),
    (SPOT_REBALANCE_RECOMMENDATION, ADVISORY),
)


UNKNOWN_DURATION = -1


# Bounds that keep every number renderable (a float) and storable: IMDS sends small integers.
_Int64 = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]
_Text = Annotated[str, msgspec.Meta(min_length=1)]


# EventIds are GUIDs (36 characters). One far longer is not an id but a broken or hostile peer, and
# every remembered id (state file, de-duplication) would carry it: refused as an invalid document.
MAX_EVENT_ID_CHARS = 512
_EventId = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_EVENT_ID_CHARS)]


# What one document may hold, so that everything derived from it (the store, the state file, /metrics,
# one poll's audit records) fits the DaemonSet's 96 MiB (docs/reliability.md). Real documents list a few
# events for a scale set's placement group or an availability set (at most a few hundred VMs); beyond
# these bounds the document is refused as invalid, loudly, rather than half-read.
MAX_EVENTS = 1000
MAX_RESOURCES = 20_000  # Resources entries over all events


class ScheduledEvent(msgspec.Struct, frozen=True, gc=False):
    """One event as the exporter uses it (immutable, cheap to compare)."""

    event_id: str
    event_type: str
    event_status: str
    resource_type: str = "VirtualMachine"
    resources: tuple[str, ...] = ()
    not_before: datetime | None = None  # timezone-aware UTC; None once Started
    description: str = ""
    event_source: str = ""  # "" with api-versions before 2019-08-01
    duration_seconds: int = UNKNOWN_DURATION


class Document(msgspec.Struct, frozen=True, gc=False):
    incarnation: int
    events: tuple[ScheduledEvent, ...] = ()


class _WireEvent(msgspec.Struct, rename="pascal", gc=False):
    """An event as IMDS writes it; null is accepted where a field may be empty."""

    event_id: _EventId
    event_type: _Text
    event_status: _Text
    resource_type: str | None = None
    resources: tuple[str, ...] = ()
    not_before: str | None = None
    description: str | None = None
    event_source: str | None = None
    duration_in_seconds: _Int64 = UNKNOWN_DURATION


class _WireDocument(msgspec.Struct, rename="pascal", gc=False):
    document_incarnation: _Int64
    events: Annotated[tuple[_WireEvent, ...], msgspec.Meta(max_length=MAX_EVENTS)] = ()


_DECODER = msgspec.json.Decoder(_WireDocument)


_HIGH, _LOW = rb"\\u[dD][89abAB][0-9a-fA-F]{2}", rb"\\u[dD][c-fC-F][0-9a-fA-F]{2}"


_RFC1123_YEAR = re.compile(r"^(?:[A-Za-z]{3},\s*)?\d{1,2}\s+[A-Za-z]{3}\s+(\d+)\b")
_LONE_SURROGATE = re.compile(_HIGH + rb"(?!" + _LOW + rb")|(?<!" + _HIGH + rb")" + _LOW)


def parse_document(body: bytes | str) -> Document:
    """Decode an IMDS answer; raise ``InvalidDocument`` saying what is wrong."""
    try:
        wire = _DECODER.decode(body)
    except msgspec.ValidationError as error:
        if str(error).endswith(f"length <= {MAX_EVENTS} - at `$.Events`"):
            raise InvalidDocument(
                f"the document lists more than {MAX_EVENTS} events; se-exporter holds at most "
                f"{MAX_EVENTS} (docs/reliability.md)"
            ) from None
        raise InvalidDocument(f"not a Scheduled Events document: {error}") from None
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError) as error:
        if _LONE_SURROGATE.search(body if isinstance(body, bytes) else body.encode("utf-8", "replace")):
            # "\ud800" is valid JSON, but no label, log line or uid can hold it
            raise InvalidDocument("body holds text that is not valid Unicode (a lone surrogate)") from None
        raise InvalidDocument(f"body is not JSON: {error}") from None
    if (resources := sum(len(raw.resources) for raw in wire.events)) > MAX_RESOURCES:
        raise InvalidDocument(
            f"the document lists {resources} Resources over its events; se-exporter holds at most "
            f"{MAX_RESOURCES} (docs/reliability.md)"
        )
    events = tuple(_event(index, raw) for index, raw in enumerate(wire.events))
    seen: set[str] = set()
    for event in events:
        if event.event_id in seen:
            raise InvalidDocument(f"EventId {event.event_id!r:.80} is listed twice")
        seen.add(event.event_id)
    return Document(wire.document_incarnation, events)


def _event(index: int, raw: _WireEvent) -> ScheduledEvent:
    return ScheduledEvent(
        raw.event_id,
        raw.event_type,
        raw.event_status,
        raw.resource_type or "VirtualMachine",
        raw.resources,
        parse_not_before(raw.not_before or "", f"Events[{index}] ({raw.event_id:.64})"),
        raw.description or "",
        raw.event_source or "",
        raw.duration_in_seconds,
    )


def parse_not_before(text: str, where: str = "event") -> datetime | None:
    """RFC 1123 as IMDS sends it, or ISO 8601 as Microsoft's mock server does; "" means none."""
    text = text.strip()
    if not text:
        return None
    try:
        return _parse_time(text)
    # OverflowError: a zone offset that moves a date beyond year 1..9999 (e.g. 9999-12-31T23:59-01:00)
    except (ValueError, TypeError, IndexError, OverflowError):
        raise InvalidDocument(f"{where}.NotBefore is neither RFC 1123 nor ISO 8601: {text!r:.80}") from None


@functools.lru_cache(maxsize=1024)  # the same few NotBefore strings come back every poll
def _parse_time(text: str) -> datetime:
    if not text[:4].isdigit() and (year := _RFC1123_YEAR.match(text)) is not None and len(year.group(1)) != 4:
        raise ValueError("RFC 1123 writes the year with four digits")  # "Apr 99" is 1999 to email.utils
    parsed = datetime.fromisoformat(text) if text[:4].isdigit() else parsedate_to_datetime(text)
    if parsed.tzinfo is None:  # IMDS times are UTC even when the zone is left out
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.astimezone(UTC)


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


class VMIdentity(msgspec.Struct, frozen=True):
    name: str | None = None  # as it appears in an event's Resources
    vm_id: str = ""
    location: str = ""
    subscription_id: str = ""
    resource_id: str = ""
    vm_size: str = ""
    vm_scale_set_name: str = ""

    def affects(self, resources: Sequence[str]) -> bool | None:
        """Whether an event listing ``resources`` affects this VM; None while this VM's name is unknown.

        Azure resource names are case-insensitive, so the comparison is too.
        """
        if not self.name:
            return None
        name = self.name.casefold()
        return any(resource.casefold() == name for resource in resources)


class _Compute(msgspec.Struct, rename="camel"):
    """The fields of ``/metadata/instance/compute`` we use; others are ignored, odd types are blanked."""

    name: Annotated[str, msgspec.Meta(min_length=1)]
    vm_id: object = ""
    location: object = ""
    subscription_id: object = ""
    resource_id: object = ""
    vm_size: object = ""
    vm_scale_set_name: object = ""


def parse_compute(body: bytes) -> VMIdentity:
    """Parse ``/metadata/instance/compute``; unknown or missing fields are left empty."""
    try:
        data = msgspec.json.decode(body, type=_Compute)
    except msgspec.ValidationError:
        raise InvalidDocument("compute metadata has no VM name") from None
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise InvalidDocument(f"compute metadata is not JSON: {exc}") from None
    return VMIdentity(
        name=data.name,
        vm_id=_text(data.vm_id),
        location=_text(data.location),
        subscription_id=_text(data.subscription_id),
        resource_id=_text(data.resource_id),
        vm_size=_text(data.vm_size),
        vm_scale_set_name=_text(data.vm_scale_set_name),
    )


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""
