"""Writes one structured log line per lifecycle transition (stderr, logfmt or JSON)."""

from __future__ import annotations

import logging

from se_exporter.poller import PollResult

log = logging.getLogger("se_exporter.events")


class TransitionLogger:
    def on_poll(self, result: PollResult) -> None:
        for transition in result.transitions:
            event = transition.event
            log.info(
                "scheduled event %s: %s %s",
                transition.kind, event.event_type, event.event_id,
                extra={
                    "transition": transition.kind,
                    "event_id": event.event_id,
                    "event_type": event.event_type,
                    "event_status": event.event_status,
                    "previous_status": transition.previous_status,
                    "not_before": event.not_before.isoformat() if event.not_before else "",
                    "document_incarnation": transition.document_incarnation,
                    "uid": transition.uid,
                },
            )
