"""The approver's ledger: what it remembers per event, and its section of the state file.

Section format (``version`` 1)::

    {"version": 1,
     "policy": "<fingerprint of the policy that made these decisions>",
     "events": {"<EventId>": {"status": "approved", "revision": "<16 hex>", "rule": "user-initiated",
                              "attempts": 0, "retry_at": null, "decided_at": 1712345678.9,
                              "last_seen": 1712345690.1}}}

Only entries that must survive a restart are written: ``approved`` (never approve twice),
``dry_run``, ``hook_failed`` and ``expired`` (not redone until the event changes), ``failed`` (with its retry
budget) and ``post_due`` (a POST was in flight: the hook had passed; POST again, IMDS answers 200 if
the event was already approved). Skips and running hooks are not saved: they are decided again.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping, MutableMapping, Set
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Annotated, Any, Literal

import msgspec

from se_exporter.approval.decision import ApprovalResult
from se_exporter.imds.document import MAX_EVENTS, ScheduledEvent
from se_exporter.state.persistence import decode_section

LEDGER_VERSION = 1
# Statuses of an entry besides the results: a hook or a POST in flight, or a POST owed after a restart.
HOOK_RUNNING = "hook_running"
POSTING = "posting"
POST_DUE = "post_due"
SavedStatus = Literal["approved", "dry_run", "hook_failed", "expired", "failed", "post_due"]
_UnixTime = Annotated[float, msgspec.Meta(ge=0, le=1e11)]
# How long a decision on an event no longer listed is remembered: an approval for a week (an EventId that
# comes back is never approved twice), anything else briefly (an IMDS glitch that listed nothing).
RETENTION_SECONDS = 7 * 24 * 3600.0
OTHER_RETENTION_SECONDS = 600.0
# The ledger's bound (and its share of the state file): twice the events a document may list. Past it,
# decisions on events no longer listed are forgotten oldest first, approvals last.
MAX_LEDGER_ENTRIES = 2 * MAX_EVENTS

log = logging.getLogger("se_exporter.approval")


@dataclass(slots=True)
class LedgerEntry:
    status: str  # an ApprovalResult value, or one of the in-flight statuses above
    revision: str  # event_revision() of the event this status is about
    rule: str = ""
    reason: str = ""  # the skip code, for SKIPPED: a skip is logged again only when it or the event changes
    attempts: int = 0  # failed POSTs for this revision
    retry_at: float | None = None  # FAILED: Unix time from which the POST may be retried; None: never
    decided_at: float = 0.0
    last_seen: float = 0.0
    # Not saved: what a skip was decided with, and the last event object seen with its revision (a hash worth
    # computing once per change, not once per poll).
    vm_name: str | None = None
    seen: ScheduledEvent | None = field(default=None, repr=False)
    seen_revision: str = ""


def restore_ledger(section: object, fingerprint: str) -> dict[str, LedgerEntry]:
    """The decisions a state file kept (``ValueError`` if damaged); with another policy only ``approved``."""
    entries, saved_with = load_ledger(section)
    if saved_with == fingerprint:
        return entries
    kept = {key: entry for key, entry in entries.items() if entry.status == ApprovalResult.APPROVED}
    if forgotten := len(entries) - len(kept):
        log.info("approval policy changed since the state was saved: deciding %d event(s) again", forgotten)
    return kept


def approved_times(ledger: Mapping[str, LedgerEntry]) -> Mapping[str, float]:
    """EventId → Unix time its approval was accepted, for every approved entry: an immutable snapshot that
    /metrics reads without the approver's lock."""
    return MappingProxyType(
        {key: entry.decided_at for key, entry in ledger.items() if entry.status == ApprovalResult.APPROVED}
    )


def new_entry(status: str, event: ScheduledEvent, revision: str, now: float, **more: Any) -> LedgerEntry:
    """An entry decided now about this revision of ``event`` (seen now, too)."""
    return LedgerEntry(status, revision, decided_at=now, last_seen=now, seen=event, seen_revision=revision, **more)


class _SavedEntry(msgspec.Struct, forbid_unknown_fields=True):
    status: SavedStatus
    revision: str
    rule: str
    attempts: Annotated[int, msgspec.Meta(ge=0)]
    retry_at: _UnixTime | None
    decided_at: _UnixTime
    last_seen: _UnixTime


class _SavedLedger(msgspec.Struct, forbid_unknown_fields=True):
    version: Literal[1]
    policy: str
    events: dict[str, _SavedEntry]


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


def dump_ledger(entries: Mapping[str, LedgerEntry], policy_fingerprint: str) -> dict[str, object]:
    events: dict[str, object] = {}
    for event_id, entry in entries.items():
        status = POST_DUE if entry.status == POSTING else entry.status
        if status in _SAVED:
            events[event_id] = {
                "status": status,
                "revision": entry.revision,
                "rule": entry.rule,
                "attempts": entry.attempts,
                "retry_at": entry.retry_at,
                "decided_at": entry.decided_at,
                "last_seen": entry.last_seen,
            }
    return {"version": LEDGER_VERSION, "policy": policy_fingerprint, "events": events}


def load_ledger(section: object) -> tuple[dict[str, LedgerEntry], str]:
    """Parse ``dump_ledger`` output; raise ``ValueError`` saying what is wrong."""
    try:
        saved = decode_section(section, _SavedLedger)
    except msgspec.MsgspecError as error:
        raise ValueError(f"approval state: {error}") from None
    entries = {
        event_id: LedgerEntry(e.status, e.revision, e.rule, "", e.attempts, e.retry_at, e.decided_at, e.last_seen)
        for event_id, e in saved.events.items()
    }
    return entries, saved.policy


_SAVED = frozenset(
    {
        ApprovalResult.APPROVED,
        ApprovalResult.DRY_RUN,
        ApprovalResult.HOOK_FAILED,
        ApprovalResult.EXPIRED,
        ApprovalResult.FAILED,
        POST_DUE,
    }
)


def prune_ledger(
    ledger: MutableMapping[str, LedgerEntry], listed: Set[str], now: float, retention: float = RETENTION_SECONDS
) -> bool:
    """Forget decisions on events gone: skips at once, approvals after ``retention``, the rest after
    ``OTHER_RETENTION_SECONDS``, and past ``MAX_LEDGER_ENTRIES`` the oldest, approvals last; True if any."""
    gone = [
        event_id
        for event_id, entry in ledger.items()
        if event_id not in listed and entry.status not in (HOOK_RUNNING, POSTING)
    ]
    forget = {event_id for event_id in gone if _expired(ledger[event_id], now, retention)}
    if (excess := len(ledger) - len(forget) - MAX_LEDGER_ENTRIES) > 0:
        kept = sorted(
            (event_id for event_id in gone if event_id not in forget),
            key=lambda event_id: (ledger[event_id].status == ApprovalResult.APPROVED, ledger[event_id].last_seen),
        )
        forget.update(kept[:excess])
    for event_id in forget:
        del ledger[event_id]
    return bool(forget)


def _expired(entry: LedgerEntry, now: float, retention: float) -> bool:
    if entry.status == ApprovalResult.SKIPPED:
        return True
    limit = retention if entry.status == ApprovalResult.APPROVED else min(retention, OTHER_RETENTION_SECONDS)
    return now - entry.last_seen > limit
