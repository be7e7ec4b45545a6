"""The approver's ledger: what it remembers per event, and its rows of the state file (``approvals``).

One row per event (key: EventId)::

    {"status": "approved", "revision": "<16 hex>", "rule": "user-initiated", "attempts": 0,
     "retry_at": null, "decided_at": 1712345678.9, "last_seen": 1712345690.1,
     "policy": "<fingerprint of the policy that made the decision>", "event_type": "Freeze"}

Only entries that must survive a restart are written: ``approved`` (never approve twice), ``unknown``
(a POST that was sent, or about to be, when the exporter died: never sent again, at most once), ``dry_run``,
``hook_failed`` and ``expired`` (not redone until the event changes), ``failed`` (with its retry budget),
``post_due`` (decided, its hook passed, not sent yet: POSTed after the restart) and ``posting`` (a POST is
being sent: read back as ``unknown``). Skips and running hooks are not saved: they are decided again.

What the approver hands to the sinks (metrics, audit trail) is an ``ApprovalDecision``, its outcome an
``ApprovalResult``.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping, MutableMapping, Set
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Annotated, Any, Literal

import msgspec

from se_exporter.durable.persistence import Tables, decode_row
from se_exporter.imds.document import MAX_EVENTS, ScheduledEvent


class ApprovalResult(StrEnum):
    APPROVED = "approved"  # POST StartRequests succeeded
    DRY_RUN = "dry_run"  # would have been approved; dry_run is on
    FAILED = "failed"  # the POST failed
    HOOK_FAILED = "hook_failed"  # the pre-approval hook failed or timed out
    EXPIRED = "expired"  # NotBefore passed before the approval could be carried out: nothing was POSTed
    UNKNOWN = "unknown"  # the exporter died while the POST was sent (or about to be): never sent again
    SKIPPED = "skipped"  # not approvable (logged once, never counted)


COUNTED_RESULTS = (
    ApprovalResult.APPROVED,
    ApprovalResult.DRY_RUN,
    ApprovalResult.FAILED,
    ApprovalResult.HOOK_FAILED,
    ApprovalResult.EXPIRED,
    ApprovalResult.UNKNOWN,
)


@dataclass(frozen=True, slots=True)
class ApprovalDecision:
    event: ScheduledEvent
    result: ApprovalResult
    rule: str  # the matching rule ("" for most skips)
    reason: str  # "<code or what happened>: <details>"
    post_latency_seconds: float | None  # approved/failed: the POST call, including the client's retries
    at: float  # Unix time of the decision

    @property
    def counted(self) -> bool:
        """True when it counts in approvals_total (everything but ``skipped``)."""
        return self.result is not ApprovalResult.SKIPPED


TABLES = ("approvals",)


# Statuses of an entry besides the results: a hook running, a POST decided and waiting for the poster
# (QUEUED, saved as post_due), a POST owed after a restart (POST_DUE), a POST being sent (POSTING: saved
# before the request leaves, so that a crash never sends it twice).
HOOK_RUNNING = "hook_running"

QUEUED = "queued"

POST_DUE = "post_due"

POSTING = "posting"

IN_FLIGHT = (HOOK_RUNNING, QUEUED, POSTING)

SavedStatus = Literal["approved", "unknown", "dry_run", "hook_failed", "expired", "failed", "post_due", "posting"]

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
    event_type: str = ""  # saved: what the audit record of an ``unknown`` outcome says after a restart
    policy: str = ""  # saved: the fingerprint of the policy that decided


FINAL = (ApprovalResult.APPROVED, ApprovalResult.UNKNOWN)  # never POSTed again, whatever the policy


def restore_ledger(tables: Tables, fingerprint: str) -> dict[str, LedgerEntry]:
    """The decisions a state file kept (``ValueError`` if damaged); those of another policy only when final
    (approved, or a POST whose outcome is unknown). An entry saved while its POST was being sent is
    ``unknown`` now: it is never sent again."""
    entries = load_ledger(tables)
    kept = {key: entry for key, entry in entries.items() if entry.policy == fingerprint or entry.status in FINAL}
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
    return LedgerEntry(
        status,
        revision,
        decided_at=now,
        last_seen=now,
        seen=event,
        seen_revision=revision,
        event_type=event.event_type,
        **more,
    )


class _SavedEntry(msgspec.Struct, forbid_unknown_fields=True):
    status: SavedStatus
    revision: str
    rule: str
    attempts: Annotated[int, msgspec.Meta(ge=0)]
    retry_at: _UnixTime | None
    decided_at: _UnixTime
    last_seen: _UnixTime
    policy: str
    event_type: str = ""


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


def dump_ledger(entries: Mapping[str, LedgerEntry], policy_fingerprint: str) -> dict[str, _SavedEntry]:
    """The ``approvals`` rows of the entries that must survive a restart."""
    rows: dict[str, _SavedEntry] = {}
    for event_id, entry in entries.items():
        status = POST_DUE if entry.status == QUEUED else entry.status
        if status in _SAVED:
            rows[event_id] = _SavedEntry(
                status,  # type: ignore[arg-type]  # one of SavedStatus: _SAVED says so
                entry.revision,
                entry.rule,
                entry.attempts,
                entry.retry_at,
                entry.decided_at,
                entry.last_seen,
                entry.policy or policy_fingerprint,
                entry.event_type,
            )
    return rows


def load_ledger(tables: Tables) -> dict[str, LedgerEntry]:
    """Parse the ``approvals`` rows; raise ``ValueError`` saying what is wrong."""
    entries: dict[str, LedgerEntry] = {}
    for event_id, body in tables.get("approvals", {}).items():
        try:
            e = decode_row(body, _SavedEntry)
        except msgspec.MsgspecError as error:
            raise ValueError(f"approval state of {event_id}: {error}") from None
        # A POST being sent when the exporter died: unknown now (its reason says so until it is reported).
        status, reason = (ApprovalResult.UNKNOWN, POSTING) if e.status == POSTING else (e.status, "")
        entries[event_id] = LedgerEntry(
            status,
            e.revision,
            e.rule,
            reason,
            e.attempts,
            e.retry_at,
            e.decided_at,
            e.last_seen,
            event_type=e.event_type,
            policy=e.policy,
        )
    return entries


_SAVED = frozenset(
    {
        ApprovalResult.APPROVED,
        ApprovalResult.UNKNOWN,
        ApprovalResult.DRY_RUN,
        ApprovalResult.HOOK_FAILED,
        ApprovalResult.EXPIRED,
        ApprovalResult.FAILED,
        POST_DUE,
        POSTING,
    }
)


def prune_ledger(ledger: MutableMapping[str, LedgerEntry], listed: Set[str], now: float) -> bool:
    """Forget decisions on events gone: skips at once, approvals after ``RETENTION_SECONDS``, the rest after
    ``OTHER_RETENTION_SECONDS``, and past ``MAX_LEDGER_ENTRIES`` the oldest, approvals last; True if any."""
    gone = [event_id for event_id, entry in ledger.items() if event_id not in listed and entry.status not in IN_FLIGHT]
    forget = {event_id for event_id in gone if _expired(ledger[event_id], now)}
    if (excess := len(ledger) - len(forget) - MAX_LEDGER_ENTRIES) > 0:
        kept = sorted(
            (event_id for event_id in gone if event_id not in forget),
            key=lambda event_id: (ledger[event_id].status in FINAL, ledger[event_id].last_seen),
        )
        forget.update(kept[:excess])
    for event_id in forget:
        del ledger[event_id]
    return bool(forget)


def _expired(entry: LedgerEntry, now: float) -> bool:
    if entry.status == ApprovalResult.SKIPPED:
        return True
    limit = RETENTION_SECONDS if entry.status in FINAL else OTHER_RETENTION_SECONDS
    return now - entry.last_seen > limit
