"""What the approver remembers per event, and its JSON-safe form for the state file.

Format (``version`` 1)::

    {"version": 1,
     "policy": "<fingerprint of the policy that made these decisions>",
     "events": {"<EventId>": {"status": "approved", "revision": "<16 hex>", "rule": "user-initiated",
                              "attempts": 0, "retry_at": null, "decided_at": 1712345678.9,
                              "last_seen": 1712345690.1}}}

Only decisions that must survive a restart are written: ``approved`` (never approve twice),
``dry_run`` and ``hook_failed`` (not redone until the event changes), ``failed`` (with its retry
budget) and ``post_due`` (a POST was in flight: the hook had passed; POST again, IMDS answers 200 if
the event was already approved). Skips and running hooks are not persisted: they are re-decided.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from se_exporter.imds.document import ScheduledEvent

STATE_VERSION = 1

# Results, as in approvals_total{result} (SKIPPED is logged only).
APPROVED = "approved"
DRY_RUN = "dry_run"
FAILED = "failed"
HOOK_FAILED = "hook_failed"
SKIPPED = "skipped"
COUNTED_RESULTS = (APPROVED, DRY_RUN, FAILED, HOOK_FAILED)

# Internal statuses besides the results.
HOOK_RUNNING = "hook_running"
POSTING = "posting"
POST_DUE = "post_due"

PERSISTED = (APPROVED, DRY_RUN, HOOK_FAILED, FAILED, POST_DUE)


@dataclass(slots=True)
class Record:
    status: str
    revision: str  # event_revision() of the event this status is about
    rule: str = ""
    reason: str = ""  # the skip code, for SKIPPED: a skip is logged again only when it or the event changes
    attempts: int = 0  # failed POSTs for this revision
    retry_at: float | None = None  # FAILED: Unix time from which the POST may be retried; None: never
    decided_at: float = 0.0
    last_seen: float = 0.0


def event_revision(event: ScheduledEvent) -> str:
    """Identifies the event's content apart from its status: it changes when "the event changes"
    (a new NotBefore, other Resources, type, source, duration or description)."""
    fields = [
        event.event_type,
        event.resource_type,
        list(event.resources),
        event.not_before.isoformat() if event.not_before else "",
        event.description,
        event.event_source,
        event.duration_seconds,
    ]
    return hashlib.sha256(json.dumps(fields).encode()).hexdigest()[:16]


def dump_records(records: Mapping[str, Record], policy_fingerprint: str) -> dict[str, object]:
    events: dict[str, object] = {}
    for event_id, record in records.items():
        status = POST_DUE if record.status == POSTING else record.status
        if status in PERSISTED:
            data = asdict(record)
            del data["reason"]
            data["status"] = status
            events[event_id] = data
    return {"version": STATE_VERSION, "policy": policy_fingerprint, "events": events}


def load_records(state: Mapping[str, object]) -> tuple[dict[str, Record], str]:
    """Parse ``dump_records`` output; raise ``ValueError`` saying what is wrong."""
    if state.get("version") != STATE_VERSION:
        raise ValueError(f"approval state: unsupported version {state.get('version')!r}")
    fingerprint = state.get("policy")
    events = state.get("events")
    if not isinstance(fingerprint, str) or not isinstance(events, dict):
        raise ValueError("approval state: 'policy' must be a string and 'events' an object")
    records = {}
    for event_id, raw in events.items():
        if not isinstance(raw, dict) or raw.get("status") not in PERSISTED:
            raise ValueError(f"approval state: event {event_id!r}: not a saved decision: {raw!r:.120}")
        try:
            retry_at = raw.get("retry_at")
            records[str(event_id)] = Record(
                status=raw["status"],
                revision=_field(raw, "revision", str),
                rule=_field(raw, "rule", str),
                attempts=_field(raw, "attempts", int),
                retry_at=None if retry_at is None else _field(raw, "retry_at", float),
                decided_at=_field(raw, "decided_at", float),
                last_seen=_field(raw, "last_seen", float),
            )
        except (KeyError, TypeError) as exc:
            raise ValueError(f"approval state: event {event_id!r}: {exc}") from None
    return records, fingerprint


def _field(raw: Mapping[str, Any], key: str, kind: type[str | int | float]) -> Any:
    value = raw[key]
    accepted = (int, float) if kind is float else (kind,)
    if not isinstance(value, accepted) or isinstance(value, bool):
        raise TypeError(f"{key} must be {kind.__name__}, got {value!r:.40}")
    return float(value) if kind is float else value
