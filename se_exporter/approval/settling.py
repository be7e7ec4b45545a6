"""What the approver's background work comes to: a hook that ended, a POST batch that ended, and the fresh
decision before every POST attempt. Each turns into ledger entries and audited decisions.

An approval is for exactly the revision that was decided and that the hook ran on: after a hook, and
before each POST attempt, the event as IMDS lists it now must still qualify *and* be that revision;
a change means "decide again" (``changed``), which runs the hook again.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass

from se_exporter.approval.decision import ApprovalDecision
from se_exporter.approval.decision import ApprovalResult as Result
from se_exporter.approval.judge import CHANGED, NOT_LISTED, Judge, past_not_before
from se_exporter.approval.ledger import QUEUED, LedgerEntry, event_revision
from se_exporter.approval.poster import Dropped, PostOutcome
from se_exporter.errors import IMDSError
from se_exporter.imds.changes import describe_change
from se_exporter.imds.document import ScheduledEvent
from se_exporter.lifecycle.transitions import EventState
from se_exporter.process.command import CommandResult

Ledger = MutableMapping[str, LedgerEntry]


@dataclass(frozen=True, slots=True)
class Item:
    """One event of a POST batch."""

    event: ScheduledEvent  # the revision the policy matched (and the hook ran on): only this one is POSTed
    rule: str
    why: str
    revision: str


@dataclass(frozen=True, slots=True)
class Hooking:
    """A hook running for one event."""

    future: Future[CommandResult]
    event: ScheduledEvent
    rule: str
    revision: str  # the event as the hook saw it


def settle_hook(
    job: Hooking, entry: LedgerEntry, state: EventState | None, *, vm_name: str | None, now: float, judge: Judge
) -> tuple[ApprovalDecision | None, Item | None]:
    """The decision a finished hook leads to, or the batch item to POST (the hook passed on the revision
    that is listed now, which still qualifies)."""
    result = _hook_result(job.future)
    if result.expired:
        entry.status = Result.EXPIRED
        return _decided(
            job.event,
            Result.EXPIRED,
            job.rule,
            f"hook {result.summary}: Azure starts the event anyway; nothing POSTed",
            now,
        ), None
    if not result.ok:
        entry.status = Result.HOOK_FAILED
        last = f"; last output: {result.last_output}" if result.last_output else ""
        return _decided(
            job.event,
            Result.HOOK_FAILED,
            job.rule,
            f"hook {result.summary}{last}; not retried until the event changes",
            now,
        ), None
    return _after_passing_hook(job, entry, state, f"hook {result.summary}", vm_name=vm_name, now=now, judge=judge)


def _after_passing_hook(
    job: Hooking,
    entry: LedgerEntry,
    state: EventState | None,
    hook: str,
    *,
    vm_name: str | None,
    now: float,
    judge: Judge,
) -> tuple[ApprovalDecision | None, Item | None]:
    """Decided again on the event as it is now: it may have started, moved, changed or gone meanwhile."""
    if state is None:
        entry.status, entry.reason = Result.SKIPPED, NOT_LISTED
        return _decided(
            job.event, Result.SKIPPED, job.rule, f"{NOT_LISTED}: the event is gone (after the {hook})", now
        ), None
    current, verdict = state.event, judge.decide(state, vm_name, now)
    if not verdict.candidate:
        entry.status, entry.reason, entry.revision = Result.SKIPPED, verdict.reason, event_revision(current)
        reason = f"{verdict.reason}: {verdict.detail} (after the {hook})"
        return _decided(current, Result.SKIPPED, job.rule, reason, now), None
    if (revision := event_revision(current)) != job.revision:
        # The hook prepared for another version of the event (fewer Resources, another type…): the entry
        # keeps the old revision, so this poll decides on the new one afresh (and runs the hook again).
        entry.status, entry.reason = Result.SKIPPED, CHANGED
        reason = f"{CHANGED}: {describe_change(job.event, current)} while its hook ran; deciding again"
        return _decided(current, Result.SKIPPED, job.rule, reason, now), None
    entry.rule = verdict.rule
    if (late := past_not_before(current, now)) is not None:
        entry.status = Result.EXPIRED
        reason = f"{hook}, but NotBefore passed {late:.0f} s ago; nothing POSTed"
        return _decided(current, Result.EXPIRED, verdict.rule, reason, now), None
    entry.status = QUEUED
    return None, Item(current, verdict.rule, f"{verdict.detail}; {hook}", revision)


def recheck(
    items: Sequence[Item], latest: Mapping[str, EventState], vm_name: str | None, now: float, judge: Judge
) -> tuple[list[tuple[str, Item]], list[Dropped[Item]]]:
    """A fresh decision on the latest document before a POST attempt: only the revision that was decided
    (and that the hook ran on) may be POSTed."""
    keep: list[tuple[str, Item]] = []
    dropped: list[Dropped[Item]] = []
    for item in items:
        state = latest.get(item.event.event_id)
        if state is None:
            dropped.append(Dropped(item, Result.SKIPPED, f"{NOT_LISTED}: the event is gone"))
            continue
        verdict, revision = judge.decide(state, vm_name, now), event_revision(state.event)
        if not verdict.candidate:  # the skip is about the revision listed now
            dropped.append(
                Dropped(
                    Item(state.event, item.rule, item.why, revision),
                    Result.SKIPPED,
                    f"{verdict.reason}: {verdict.detail}",
                )
            )
        elif revision != item.revision:  # kept with the decided revision: the next poll decides afresh
            change = describe_change(item.event, state.event)
            dropped.append(Dropped(item, Result.SKIPPED, f"{CHANGED}: {change}; deciding again"))
        elif (late := past_not_before(state.event, now)) is not None:
            dropped.append(
                Dropped(
                    item, Result.EXPIRED, f"NotBefore passed {late:.0f} s ago: Azure starts it anyway; nothing POSTed"
                )
            )
        else:
            keep.append((state.event.event_id, Item(state.event, verdict.rule, item.why, item.revision)))
    return keep, dropped


def settle_post(
    outcome: PostOutcome[Item],
    ledger: Ledger,
    latest: Mapping[str, EventState],
    now: float,
    retry_delays: Sequence[float],
) -> list[ApprovalDecision]:
    """The decisions a finished POST batch comes to: the items a recheck dropped, then approved or failed."""
    decisions = [_dropped(gone, ledger, latest, outcome.attempts, now) for gone in outcome.dropped]
    error = outcome.error
    together = f" (one request for {len(outcome.items)} events)" if len(outcome.items) > 1 else ""
    tries = f" at attempt {outcome.attempts}" if outcome.attempts > 1 else ""
    for item in outcome.items:
        entry = ledger[item.event.event_id]
        entry.decided_at = now
        if error is None:
            entry.status = Result.APPROVED
            reason = f"{item.why}; POST StartRequests succeeded{tries}{together}"
            decisions.append(
                ApprovalDecision(item.event, Result.APPROVED, item.rule, reason, outcome.latency_seconds, now)
            )
            continue
        entry.status = Result.FAILED
        entry.attempts += 1
        if isinstance(error, IMDSError) and error.retryable and entry.attempts <= len(retry_delays):
            delay = retry_delays[entry.attempts - 1]
            entry.retry_at = now + delay
            then = f"POST retry {entry.attempts}/{len(retry_delays)} in {delay:g} s if still approvable"
        else:
            entry.retry_at = None
            then = "not retried until the event changes"
        after = f" after {outcome.attempts} attempt(s)" if outcome.attempts else ""
        reason = f"POST StartRequests failed{together}{after}: {type(error).__name__}: {error}; {then}"
        decisions.append(ApprovalDecision(item.event, Result.FAILED, item.rule, reason, outcome.latency_seconds, now))
    return decisions


def _dropped(
    gone: Dropped[Item], ledger: Ledger, latest: Mapping[str, EventState], attempts: int, now: float
) -> ApprovalDecision:
    """An item a recheck took out of a batch: skipped (no longer approvable, or changed) or expired."""
    item = gone.item
    entry = ledger[item.event.event_id]
    entry.decided_at = now
    entry.revision = item.revision  # after a change, the decided one: the next poll decides afresh
    result = Result(gone.result)
    entry.status, entry.reason = result, gone.reason.split(":", 1)[0]
    current = latest.get(item.event.event_id)
    shown = current.event if current is not None else item.event
    reason = f"{gone.reason} (decided again before POST attempt {attempts + 1})"
    return ApprovalDecision(shown, result, item.rule, reason, None, now)


def _decided(event: ScheduledEvent, result: Result, rule: str, reason: str, now: float) -> ApprovalDecision:
    return ApprovalDecision(event, result, rule, reason, None, now)


def _hook_result(future: Future[CommandResult]) -> CommandResult:
    if future.cancelled():
        return CommandResult(exit_code=None, timed_out=False, duration_seconds=0.0, summary="was cancelled")
    error = future.exception()
    if error is not None:
        return CommandResult(exit_code=None, timed_out=False, duration_seconds=0.0, summary=f"runner error: {error!r}")
    return future.result()
