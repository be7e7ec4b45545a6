"""The audit trail: one record per lifecycle transition and per approval decision, in the order they happened.

A POST's outcome comes first (it ended before the document was read: its approval caused the ``started``
the document shows), then the document's transitions, then the decisions made on it. Each
record is written twice: as one structured line on stderr (logger ``se_exporter.events``,
logfmt or JSON per ``--log.format``, so journald / Fluent Bit users need no collector) and into the
OTLP log spool when log export is on. The poll loop calls ``on_poll`` before it saves the event
store: the records are inserted by the transaction that saves the store's rows, so a crash keeps both or
neither, and the collector gets each transition exactly once.
"""

from __future__ import annotations

import itertools
import logging

from se_exporter.audit.records import ERROR, WARN, AuditRecord, action_record, approval_record, transition_record
from se_exporter.durable.spool import Spool
from se_exporter.logs import FIELDS
from se_exporter.poller import PollResult

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
