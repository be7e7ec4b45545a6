"""Every decision the approver makes on an event (the first, after a hook, before each POST attempt) is
the judge's: the policy's verdict with the event's impact and cause, no approval while the state
file cannot be saved, and which skips hold until the event or this VM's name changes."""

from __future__ import annotations

from collections.abc import Callable

from se_exporter.approval.ledger import LedgerEntry, event_revision
from se_exporter.approval.policy import NO_RULE, NOT_LEADER, NOT_SCHEDULED, NOT_THIS_VM, Policy, Verdict
from se_exporter.imds.document import ScheduledEvent
from se_exporter.imds.impact import Classification
from se_exporter.lifecycle.transitions import EventState

NOT_LISTED = "not_listed"  # skip reason when an event disappears while its hook runs
# Skip reason when the event changed (another revision: Resources, type, NotBefore…) after the policy matched
# it and its hook ran, before the POST: an approval is for exactly what was decided, so it is decided again.
CHANGED = "changed"
STATE_UNSAVED = "state_unsaved"  # skip reason while the state file cannot be saved (see ``can_remember``)
STABLE_SKIPS = frozenset({NOT_SCHEDULED, NOT_THIS_VM, NOT_LEADER})  # hold until the event or the VM name changes


class Judge:
    def __init__(self, policy: Policy, can_remember: Callable[[], bool]) -> None:
        self.policy = policy
        # False while the state file cannot be saved: an approval made then would be forgotten by a
        # restart, which would approve (and run the hook) again. Nothing is started until it can.
        self._can_remember = can_remember

    def decide(self, state: EventState, vm_name: str | None, now: float) -> Verdict:
        """The policy's verdict on a listed event, with its impact and cause; no candidate while the state
        file cannot be saved."""
        verdict = self.policy.decide(state.event, vm_name, now, Classification(state.impact, state.cause))
        if verdict.candidate and not self._can_remember():
            return Verdict(
                False,
                reason=STATE_UNSAVED,
                detail=f"{verdict.detail}, but the state file cannot be "
                "saved: approving now could approve twice after a restart",
            )
        return verdict

    def stable(self, reason: str) -> bool:
        """Whether a skip for ``reason`` holds until the event or this VM's name changes (the time aside)."""
        return reason in STABLE_SKIPS or (reason == NO_RULE and not self.policy.time_dependent)


def revision(entry: LedgerEntry | None, event: ScheduledEvent) -> str:
    """``event_revision(event)``, computed once per event object (the store hands back the same one while
    the event is unchanged)."""
    if entry is not None and entry.seen is event:
        return entry.seen_revision
    computed = event_revision(event)
    if entry is not None:
        entry.seen, entry.seen_revision = event, computed
    return computed


def past_not_before(event: ScheduledEvent, now: float) -> float | None:
    """Seconds since the event's NotBefore, or None while it is still ahead (or the event has none)."""
    if event.not_before is None or (late := now - event.not_before.timestamp()) < 0:
        return None
    return late
