"""Audit records as plain data, one per lifecycle transition, approval decision and action run, and the audit
trail that makes them from each poll, in the order things happened.

An ``AuditRecord`` is what docs/design.md's OpenTelemetry section calls a log record, before any SDK sees it:
the spool stores it as JSON, the stderr line and the OTLP export are both rendered from it. Its
``uid`` (the ``log.record.uid`` attribute) is stable: a transition re-emitted after a crash gets
the same uid, so the spool and downstream receivers can drop the duplicate.

``AuditTrail`` writes a poll's records: a POST's outcome first (it ended before the document was read: its
approval caused the ``started`` the document shows), then the document's transitions, then the decisions
made on it. Each record is written twice: as one structured line on stderr (logger ``se_exporter.events``,
logfmt or JSON per ``--log.format``, so journald / Fluent Bit users need no collector) and into the OTLP log
spool when log export is on. The poll loop calls ``on_poll`` before it saves the event store: the records
are inserted by the transaction that saves the store's rows, so a crash keeps both or neither, and the
collector gets each transition exactly once.
"""

from __future__ import annotations

import itertools
import logging
import uuid
from collections.abc import Mapping

import msgspec

from se_exporter.actions.runs import ActionOutcome, ActionResult
from se_exporter.approval.ledger import ApprovalDecision, ApprovalResult
from se_exporter.common.times import rfc3339, unix_nanos
from se_exporter.durable.spool import Spool
from se_exporter.imds.document import VMIdentity
from se_exporter.imds.impact import DISRUPTIVE_IMPACTS
from se_exporter.lifecycle.transitions import OPENING, Transition, TransitionKind
from se_exporter.logs import FIELDS
from se_exporter.poller import PollResult

TRANSITION_EVENT = "scheduled_event.transition"
APPROVAL_EVENT = "scheduled_event.approval"
ACTION_EVENT = "scheduled_event.action"


INFO, WARN, ERROR = "INFO", "WARN", "ERROR"


_APPROVAL_UID_NAMESPACE = uuid.UUID("0b7f1d2e-3c4a-4e5f-8a6b-7c8d9e0f1a2b")
_ACTION_UID_NAMESPACE = uuid.UUID("5e1f0c3a-9b2d-4c7e-8f6a-1d2c3b4a5e6f")
AttributeValue = str | bool | int | float | tuple[str, ...]


class AuditRecord(msgspec.Struct, frozen=True, gc=False):  # a Struct: ten times cheaper to make than a dataclass
    event_name: str
    severity: str  # INFO | WARN | ERROR
    body: str
    attributes: Mapping[str, AttributeValue]
    timestamp_ns: int  # when the exporter observed the change (or decided)
    uid: str

    @property
    def approximate_size(self) -> int:
        """About what it weighs in an OTLP request (the strings dominate): for bounding batches."""
        size = len(self.body) + len(self.event_name) + 64
        for key, value in self.attributes.items():
            size += len(key) + 16 + (sum(len(v) + 2 for v in value) if isinstance(value, tuple) else len(str(value)))
        return size


def encode_record(record: AuditRecord) -> bytes:
    """A record as the spool keeps it (and 0.1's journal did): its fields as a JSON object."""
    # Copied to its exact size: msgspec's buffer keeps its growth slack (96 KiB held for 64 KiB of JSON),
    # and the spool holds these while no commit carried them.
    return bytes(memoryview(msgspec.json.encode(record)))


def decode_record(body: bytes) -> AuditRecord | None:
    """The record the spool kept (None: a row this version cannot read, which the spool sets aside)."""
    try:
        return msgspec.json.decode(body, type=AuditRecord)
    except msgspec.MsgspecError:
        return None


def transition_record(transition: Transition, identity: VMIdentity) -> AuditRecord:
    event = transition.event
    attributes: dict[str, AttributeValue] = {
        "scheduled_event.transition": transition.kind,
        "scheduled_event.id": event.event_id,
        "scheduled_event.type": event.event_type,
        "scheduled_event.status": event.event_status,
        "scheduled_event.previous_status": transition.previous_status,
        "scheduled_event.source": event.event_source,
        "scheduled_event.resources": tuple(event.resources),
        "scheduled_event.duration_s": event.duration_seconds,
        "scheduled_event.description": event.description,
        "scheduled_event.document_incarnation": transition.document_incarnation,
        "scheduled_event.impact": transition.impact,
        "scheduled_event.cause": transition.cause,
    }
    not_before = rfc3339(event.not_before) if event.not_before is not None else None
    if not_before is not None:
        attributes["scheduled_event.not_before"] = not_before
    affects = identity.affects(event.resources)
    if affects is not None:  # a bool cannot say "unknown": left out while this VM's name is unknown
        attributes["scheduled_event.affects_this_vm"] = affects
    if transition.kind is TransitionKind.COMPLETED and transition.started_seconds is not None:
        attributes["scheduled_event.started_s"] = round(transition.started_seconds, 3)
    if transition.changes:
        attributes["scheduled_event.changes"] = transition.changes
    if transition.started_observed is not None:  # on every completed
        attributes["scheduled_event.started_observed"] = transition.started_observed
    if transition.observed_until_not_before is not None:  # on every cancelled
        attributes["scheduled_event.observed_until_not_before"] = transition.observed_until_not_before
    attributes["log.record.uid"] = uid = transition.uid
    coming = transition.kind in (*OPENING, TransitionKind.UPDATED)
    # A warning for a Reboot … Terminate of this VM (or of a VM not yet known by name); an event of another
    # VM of its availability set or placement group, which Azure sends to every member, is information.
    disruptive = transition.impact in DISRUPTIVE_IMPACTS and affects is not False
    severity = WARN if coming and disruptive else INFO
    return AuditRecord(
        TRANSITION_EVENT,
        severity,
        _transition_body(transition, affects, not_before),
        attributes,
        unix_nanos(transition.observed_at),
        uid,
    )


def approval_record(decision: ApprovalDecision) -> AuditRecord:
    event = decision.event
    # Every decision is a distinct audit fact (a re-decision after a crash is a real second one).
    uid = str(uuid.uuid5(_APPROVAL_UID_NAMESPACE, f"{event.event_id}/{decision.result}/{decision.at!r}"))
    attributes: dict[str, AttributeValue] = {
        "scheduled_event.id": event.event_id,
        "scheduled_event.type": event.event_type,
        "scheduled_event.approval.result": decision.result,
        "scheduled_event.approval.rule": decision.rule,
        "scheduled_event.approval.reason": decision.reason,
    }
    if decision.post_latency_seconds is not None:
        attributes["scheduled_event.approval.post_latency_s"] = round(decision.post_latency_seconds, 3)
    attributes["log.record.uid"] = uid
    severity = {ApprovalResult.FAILED: ERROR, ApprovalResult.HOOK_FAILED: WARN, ApprovalResult.EXPIRED: WARN}.get(
        decision.result, INFO
    )
    rule = f" by rule {decision.rule}" if decision.rule else ""
    body = f"{event.event_type} approval: {decision.result}{rule}: {decision.reason}"  # the id: an attribute
    return AuditRecord(APPROVAL_EVENT, severity, body, attributes, unix_nanos(decision.at), uid)


def _transition_body(transition: Transition, affects: bool | None, not_before: str | None) -> str:
    event, kind = transition.event, transition.kind
    if kind is TransitionKind.SCHEDULED or kind is TransitionKind.RESCHEDULED:
        what = f"{kind}, not before {not_before}" if not_before else str(kind)
    elif kind is TransitionKind.COMPLETED and transition.started_seconds is not None:
        what = f"completed after {transition.started_seconds:.0f} s in Started"
    elif kind is TransitionKind.COMPLETED and transition.started_observed is False:
        what = "completed while the exporter could not look (its NotBefore passed then; its start was not seen)"
    elif kind is TransitionKind.UPDATED:
        what = f"updated in place: {transition.changes.removeprefix('the event changed ')}"
    elif kind is TransitionKind.LISTED:
        what = f"listed as {event.event_status}" + (f", not before {not_before}" if not_before else "")
    elif kind is TransitionKind.REMOVED:
        what = f"removed while {transition.previous_status}"
    else:
        what = str(kind)
    whom = "" if affects is None else ", affects this VM" if affects else ", does not affect this VM"
    source = f", source {event.event_source}" if event.event_source else ""
    what_it_does = f"impact {transition.impact}, cause {transition.cause}"
    return f"{event.event_type} {what}{whom} ({what_it_does}{source})"  # the id is an attribute (and a field)


def action_record(outcome: ActionOutcome) -> AuditRecord:
    transition, event = outcome.transition, outcome.transition.event
    uid = str(uuid.uuid5(_ACTION_UID_NAMESPACE, outcome.uid))  # one run per transition and action: stable
    attributes: dict[str, AttributeValue] = {
        "scheduled_event.id": event.event_id,
        "scheduled_event.type": event.event_type,
        "scheduled_event.transition": transition.kind,
        "scheduled_event.impact": transition.impact,
        "scheduled_event.cause": transition.cause,
        "scheduled_event.action.name": outcome.action,
        "scheduled_event.action.result": outcome.result,
        "scheduled_event.action.summary": outcome.summary,
        "scheduled_event.action.duration_s": round(outcome.duration_seconds, 3),
        "log.record.uid": uid,
    }
    if outcome.last_output:
        attributes["scheduled_event.action.last_output"] = outcome.last_output
    severity = INFO if outcome.result is ActionResult.SUCCEEDED else WARN
    body = f"{event.event_type} {transition.kind}: action {outcome.action} {outcome.result}: {outcome.summary}"
    return AuditRecord(ACTION_EVENT, severity, body, attributes, unix_nanos(outcome.at), uid)


log = logging.getLogger("se_exporter.events")
_LEVELS = {WARN: logging.WARNING, ERROR: logging.ERROR}
CHUNK = 200


# What a line shows on a terminal at info level: what happened, and to which event (so that one grep finds
# an event's every line); the body says the rest, debug and JSON show every field.
_SUMMARY = (
    "scheduled_event.transition",
    "scheduled_event.approval.result",
    "scheduled_event.action.name",
    "scheduled_event.action.result",
    "scheduled_event.id",
)


class AuditTrail:
    """A poll sink: writes each result's decisions, action outcomes and transitions as log lines and into the
    spool."""

    def __init__(self, spool: Spool[AuditRecord] | None = None) -> None:
        self._spool = spool

    def on_poll(self, result: PollResult) -> None:
        if not result.decisions and not result.transitions and not result.settled and not result.actions:
            return
        # In the order things happened: a POST's outcome and the actions that ended (before the document was
        # read: an approval caused the "started" it shows), the document's transitions, then the decisions.
        records = itertools.chain(
            (approval_record(decision) for decision in result.settled),
            (action_record(outcome) for outcome in result.actions),
            (transition_record(transition, result.identity) for transition in result.transitions),
            (approval_record(decision) for decision in result.decisions),
        )
        # A few hundred at a time: a document that lists a thousand new events at once (and removes as many)
        # must not hold every record, line and journal entry in memory together.
        while batch := list(itertools.islice(records, CHUNK)):
            self._write(batch)

    def _write(self, records: list[AuditRecord]) -> None:
        for record in records:
            level = _LEVELS.get(record.severity, logging.INFO)
            if log.isEnabledFor(level):
                # Made and handled directly: the caller's file and line (findCaller) mean nothing here.
                fields = (
                    {
                        "event": record.event_name,
                        **{key: record.attributes[key] for key in _SUMMARY if key in record.attributes},
                    },
                    record.attributes,
                )
                log.handle(log.makeRecord(log.name, level, "", 0, record.body, (), None, extra={FIELDS: fields}))
        if self._spool is not None:
            self._spool.append(records)
