"""The audit trail: one record per lifecycle transition and per approval decision.

Each record is written twice: as one structured line on stderr (logger ``se_exporter.events``,
logfmt or JSON per ``--log.format``, so journald / Fluent Bit users need no collector) and into the
OTLP log spool when log export is on. The poll loop calls ``on_poll`` before it saves the event
store, and the spool is durable when the call returns: a crash in between re-emits the transition
on restart with the same uid, which the spool recognises, so the collector gets it exactly once.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from se_exporter.audit.records import ERROR, WARN, Decision, Record, approval_record, transition_record
from se_exporter.audit.spool import Spool
from se_exporter.poller import PollResult

log = logging.getLogger("se_exporter.events")
_LEVELS = {WARN: logging.WARNING, ERROR: logging.ERROR}


class EventLog:
    def __init__(self, spool: Spool | None = None) -> None:
        self._spool = spool

    def on_poll(self, result: PollResult) -> None:
        self._write([transition_record(t, result.identity) for t in result.transitions])

    def on_decision(self, decision: Decision) -> None:
        """The approval engine's ``emit_decision`` callback."""
        self._write([approval_record(decision)])

    def _write(self, records: Iterable[Record]) -> None:
        batch = list(records)
        for record in batch:
            # Dotted attribute names never collide with logging's own LogRecord fields.
            fields = {"event": record.event_name, **record.attributes}
            log.log(_LEVELS.get(record.severity, logging.INFO), record.body, extra=fields)
        if self._spool is not None and batch:
            self._spool.append(batch)
