"""The audit trail: one record per lifecycle transition and per approval decision, in that poll's order.

Decisions come first: an approval made in a poll caused what the same poll's transitions show. Each
record is written twice: as one structured line on stderr (logger ``se_exporter.events``,
logfmt or JSON per ``--log.format``, so journald / Fluent Bit users need no collector) and into the
OTLP log spool when log export is on. The poll loop calls ``on_poll`` before it saves the event
store, and the spool is durable when the call returns: a crash in between re-emits the transition
on restart with the same uid, which the spool recognises, so the collector gets it exactly once.
"""

from __future__ import annotations

import itertools
import logging

from se_exporter.audit.records import ERROR, WARN, AuditRecord, approval_record, transition_record
from se_exporter.audit.spool import Spool
from se_exporter.logs import FIELDS
from se_exporter.poller import PollResult

log = logging.getLogger("se_exporter.events")
_LEVELS = {WARN: logging.WARNING, ERROR: logging.ERROR}
CHUNK = 200


class AuditTrail:
    """A poll sink: writes each result's decisions and transitions as log lines and into the spool."""

    def __init__(self, spool: Spool | None = None) -> None:
        self._spool = spool

    def on_poll(self, result: PollResult) -> None:
        if not result.decisions and not result.transitions:
            return
        records = itertools.chain((approval_record(decision) for decision in result.decisions),
                                  (transition_record(transition, result.identity) for transition in result.transitions))
        # A few hundred at a time: a document that lists a thousand new events at once (and removes as many)
        # must not hold every record, line and journal entry in memory together.
        while batch := list(itertools.islice(records, CHUNK)):
            self._write(batch)

    def _write(self, records: list[AuditRecord]) -> None:
        for record in records:
            level = _LEVELS.get(record.severity, logging.INFO)
            if log.isEnabledFor(level):
                # Made and handled directly: the caller's file and line (findCaller) mean nothing here.
                fields = ({"event": record.event_name}, record.attributes)
                log.handle(log.makeRecord(log.name, level, "", 0, record.body, (), None, extra={FIELDS: fields}))
        if self._spool is not None:
            self._spool.append(records)
