"""Plugs the approver into the exporter: a poll sink that also persists the approver's state."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from se_exporter.approval.approver import ApprovalDecision, Approver
from se_exporter.approval.policy import Policy
from se_exporter.approval.poster import PostStartRequests
from se_exporter.poller import PollResult
from se_exporter.state.persistence import Persistence

log = logging.getLogger("se_exporter.approval")
STATE_SECTION = "approvals"


class ApprovalSink:
    """Feeds each successful poll to the approver; has its decisions saved whenever they change."""

    def __init__(self, approver: Approver, persistence: Persistence) -> None:
        self.approver = approver
        self._persistence = persistence
        self._saved: Any = _decisions(approver.to_state())
        persistence.register(STATE_SECTION, approver.to_state)

    def on_poll(self, result: PollResult) -> None:
        self.approver.on_poll(result.document.events, result.identity.name)
        decisions = _decisions(self.approver.to_state())
        if decisions != self._saved:  # an approval must be on disk before a restart could repeat it
            self._persistence.request_save()  # written by the poller at the end of this poll
            self._saved = decisions

    def close(self) -> None:
        """Stop the approver; its final state is in the owner's next save (``Exporter.close``)."""
        self.approver.close()


def _decisions(state: dict[str, Any]) -> dict[str, Any]:
    """The state without when each event was last seen: refreshed every poll, it alone is not worth a write
    (it reaches the file with the next save, and only matters for the 7-day retention)."""
    events = {event_id: {**record, "last_seen": None} for event_id, record in state["events"].items()}
    return {**state, "events": events}


def build_approval_sink(
    policy: Policy,
    post_start_requests: PostStartRequests,
    emit_decision: Callable[[ApprovalDecision], None],
    persistence: Persistence,
) -> ApprovalSink:
    """An approval sink that remembers earlier decisions from the state file."""
    saved = persistence.loaded.get(STATE_SECTION)
    approver: Approver | None = None
    if saved is not None:
        try:
            approver = Approver.from_state(saved, policy, post_start_requests, emit_decision)
        except ValueError as error:
            log.warning("ignoring the approval decisions in the state file: %s", error)
    if approver is None:
        approver = Approver(policy, post_start_requests, emit_decision)
    mode = "dry run: decisions are logged, nothing is approved" if policy.dry_run else "approvals are POSTed"
    log.info("approval policy %s loaded: %d rule(s), leader=%s, %s", policy.source, len(policy.rules),
             policy.leader, mode)
    return ApprovalSink(approver, persistence)
