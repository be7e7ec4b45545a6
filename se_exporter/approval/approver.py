"""The approver: turns each poll's events into audited approval decisions, never blocking the poll.

``on_poll`` runs in the poll thread and only decides and bookkeeps; it returns the decisions in the
order things happened: those that settle work finished before this document was read (a POST's
outcome), then those made on this document, which the poller writes after the document's own
transitions. Every decision comes from ``PolicyVerdicts`` (``approval/policy.py``). Hooks run on the hook
runner's thread; POSTs on one background thread (the poster), because retries take seconds and the poll
loop must keep observing meanwhile. What they come to (a hook that ended, a POST batch that ended, the fresh
decision before every POST attempt) is settled here (``settle_hook``, ``settle_post``, ``recheck``) into
ledger entries and audited decisions. Its semantics (``approved`` is final; one POST per poll for every
candidate; a change means a new decision; nothing approved after NotBefore; retries of ``failed``; at most
once across crashes) are in full in docs/approval.md.

An approval is for exactly the revision that was decided and that the hook ran on: after a hook, and
before each POST attempt, the event as IMDS lists it now must still qualify *and* be that revision;
a change means "decide again" (``changed``), which runs the hook again. ``LastLook`` is what the poster
relies on: the approver's latest look at the listed events (and how old it is), and the decision saved in
the state file. After the process was paused (a Freeze pauses the whole VM; so does a SIGSTOP), the poster
wakes up with the poll loop and would POST on what it saw before the pause, so a POST waits (on its own
thread, bounded) for a look younger than ``fresh_within``, by both clocks (a paused VM's monotonic clock may
not have moved). A POST is sent only once the state file holds it as being sent (the approver waits up to
``SAVED_WAIT_SECONDS`` for that commit, on the poster's thread, never the poll's); one saved so and never
settled is ``unknown`` after a restart, never sent again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from concurrent.futures import CancelledError, Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any, NamedTuple

from se_exporter.approval.hook import HookRunner, HookSubmitter
from se_exporter.approval.ledger import (
    HOOK_RUNNING,
    IN_FLIGHT,
    POST_DUE,
    POSTING,
    QUEUED,
    ApprovalDecision,
    LedgerEntry,
    approved_times,
    dump_ledger,
    event_revision,
    new_entry,
    prune_ledger,
)
from se_exporter.approval.ledger import ApprovalResult as Result
from se_exporter.approval.policy import (
    CHANGED,
    NOT_LISTED,
    STATE_UNSAVED,
    Policy,
    PolicyVerdicts,
    Verdict,
    past_not_before,
    revision,
)
from se_exporter.approval.poster import BackgroundPoster, Dropped, PostOutcome, PostRetry, PostStartRequests
from se_exporter.errors import IMDSError
from se_exporter.imds.document import SCHEDULED, ScheduledEvent, describe_change
from se_exporter.imds.impact import Classification
from se_exporter.lifecycle.transitions import EventState
from se_exporter.process.command import CommandResult

FRESH_WAIT_SECONDS = 30.0  # then the recheck goes on with what there is (IMDS down: the POST fails anyway)

SAVED_WAIT_SECONDS = 60.0  # a POST not saved as being sent by then is not sent (skip reason state_unsaved)

POST_RETRY_DELAYS_SECONDS = (15.0, 60.0)  # after a failed batch, the approver decides again and POSTs then


class LastLook:
    """Guarded by the approver's lock: every method is called with it held."""

    def __init__(
        self,
        lock: threading.Lock,
        fresh_within: float,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._changed = threading.Condition(lock)
        self._fresh_within = fresh_within
        self._clock = clock
        self._monotonic = monotonic
        self.events: Mapping[str, EventState] = {}
        self.vm_name: str | None = None
        self._taken = (float("-inf"), float("-inf"))  # wall and monotonic time of the look
        self._closed = False

    def update(self, events: Mapping[str, EventState], vm_name: str | None, now: float) -> None:
        self.events, self.vm_name = events, vm_name
        self._taken = (now, self._monotonic())
        self._changed.notify_all()

    def wait_fresh(self, timeout: float = FRESH_WAIT_SECONDS) -> None:
        """Until the look is fresh, the view closed, or ``timeout`` seconds passed (the lock is released
        meanwhile, so the poll loop can bring the next look)."""
        deadline = time.monotonic() + timeout  # real time, whatever clocks were injected
        while not self._closed and self._age() > self._fresh_within:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self._changed.wait(min(left, 1.0))

    def close(self) -> None:
        self._closed = True
        self._changed.notify_all()

    def _age(self) -> float:
        wall, mono = self._taken
        return max(self._clock() - wall, self._monotonic() - mono)


Ledger = MutableMapping[str, LedgerEntry]


@dataclass(frozen=True, slots=True)
class PostItem:
    """One event of a POST batch."""

    event: ScheduledEvent  # the revision the policy matched (and the hook ran on): only this one is POSTed
    rule: str
    why: str
    revision: str


@dataclass(frozen=True, slots=True)
class RunningHook:
    """A hook running for one event."""

    future: Future[CommandResult]
    event: ScheduledEvent
    rule: str
    revision: str  # the event as the hook saw it


def settle_hook(
    job: RunningHook,
    entry: LedgerEntry,
    state: EventState | None,
    *,
    vm_name: str | None,
    now: float,
    verdicts: PolicyVerdicts,
) -> tuple[ApprovalDecision | None, PostItem | None]:
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
    return _after_passing_hook(job, entry, state, f"hook {result.summary}", vm_name=vm_name, now=now, verdicts=verdicts)


def _after_passing_hook(
    job: RunningHook,
    entry: LedgerEntry,
    state: EventState | None,
    hook: str,
    *,
    vm_name: str | None,
    now: float,
    verdicts: PolicyVerdicts,
) -> tuple[ApprovalDecision | None, PostItem | None]:
    """Decided again on the event as it is now: it may have started, moved, changed or gone meanwhile."""
    if state is None:
        entry.status, entry.reason = Result.SKIPPED, NOT_LISTED
        return _decided(
            job.event, Result.SKIPPED, job.rule, f"{NOT_LISTED}: the event is gone (after the {hook})", now
        ), None
    current, verdict = state.event, verdicts.decide(state, vm_name, now)
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
    return None, PostItem(current, verdict.rule, f"{verdict.detail}; {hook}", revision)


def recheck(
    items: Sequence[PostItem],
    latest: Mapping[str, EventState],
    vm_name: str | None,
    now: float,
    verdicts: PolicyVerdicts,
) -> tuple[list[tuple[str, PostItem]], list[Dropped[PostItem]]]:
    """A fresh decision on the latest document before a POST attempt: only the revision that was decided
    (and that the hook ran on) may be POSTed."""
    keep: list[tuple[str, PostItem]] = []
    dropped: list[Dropped[PostItem]] = []
    for item in items:
        state = latest.get(item.event.event_id)
        if state is None:
            dropped.append(Dropped(item, Result.SKIPPED, f"{NOT_LISTED}: the event is gone"))
            continue
        verdict, revision = verdicts.decide(state, vm_name, now), event_revision(state.event)
        if not verdict.candidate:  # the skip is about the revision listed now
            dropped.append(
                Dropped(
                    PostItem(state.event, item.rule, item.why, revision),
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
            keep.append((state.event.event_id, PostItem(state.event, verdict.rule, item.why, item.revision)))
    return keep, dropped


def settle_post(
    outcome: PostOutcome[PostItem],
    ledger: Ledger,
    latest: Mapping[str, EventState],
    now: float,
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
        if isinstance(error, IMDSError) and error.retryable and entry.attempts <= len(POST_RETRY_DELAYS_SECONDS):
            delay = POST_RETRY_DELAYS_SECONDS[entry.attempts - 1]
            entry.retry_at = now + delay
            then = f"POST retry {entry.attempts}/{len(POST_RETRY_DELAYS_SECONDS)} in {delay:g} s if still approvable"
        else:
            entry.retry_at = None
            then = "not retried until the event changes"
        after = f" after {outcome.attempts} attempt(s)" if outcome.attempts else ""
        reason = f"POST StartRequests failed{together}{after}: {type(error).__name__}: {error}; {then}"
        decisions.append(ApprovalDecision(item.event, Result.FAILED, item.rule, reason, outcome.latency_seconds, now))
    return decisions


def _dropped(
    gone: Dropped[PostItem], ledger: Ledger, latest: Mapping[str, EventState], attempts: int, now: float
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


log = logging.getLogger("se_exporter.approval")


class PollDecisions(NamedTuple):
    """One poll's decisions, in the order things happened around the document."""

    settled: list[ApprovalDecision]  # work that ended before the document was read: a POST's outcome
    made: list[ApprovalDecision]  # decided on this document (after its transitions)


class Approver:
    def __init__(
        self,
        policy: Policy,
        post_start_requests: PostStartRequests,
        *,
        hook_runner: HookSubmitter | None = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        post_retry: PostRetry | None = None,
        can_remember: Callable[[], bool] = lambda: True,
        fresh_within: float = 5.0,  # a POST waits for a look this young (LastLook)
        pace: Callable[[], None] = lambda: None,  # waits for a POST's request slot, before its recheck
        # The future of a commit carrying every change made so far (durable.persistence: commit_requested).
        commit_requested: Callable[[], Future[None]] | None = None,
        ledger: Mapping[str, LedgerEntry] | None = None,  # decisions restored from the state file
    ) -> None:
        self._policy = policy
        self._verdicts = PolicyVerdicts(policy, can_remember)
        if hook_runner is None and policy.hook is not None and not policy.dry_run:
            hook_runner = HookRunner(policy.hook)
        self._hook_runner = hook_runner
        self._clock = clock
        self._ledger: dict[str, LedgerEntry] = dict(ledger or {})
        self._hooks: dict[str, RunningHook] = {}
        self._poster: BackgroundPoster[PostItem] = BackgroundPoster(
            post_start_requests, self._recheck, post_retry, monotonic, pace
        )
        self._lock = threading.Lock()
        self._commit_requested = commit_requested or _committed
        self._view = LastLook(self._lock, fresh_within, clock, monotonic)  # for the poster
        # POSTs that were being sent when the exporter died: said once, at the first poll, as ``unknown``.
        self._unknown = [key for key, entry in self._ledger.items() if entry.status == Result.UNKNOWN and entry.reason]
        self._said_no_name = False
        self._closed = False
        self.approved: Mapping[str, float] = approved_times(self._ledger)  # replaced whole, read by /metrics
        self.state_version = 0  # moves whenever to_state() would save something new (durable.persistence)

    def rows(self) -> dict[str, Mapping[str, object]]:
        """The decisions to keep across a restart, a row each (see ``approval.ledger`` for the format)."""
        with self._lock:
            return {"approvals": dump_ledger(self._ledger, self._policy.fingerprint)}

    def on_poll(self, events: Sequence[EventState], vm_name: str | None) -> PollDecisions:
        """Decide on this poll's listed events (the store's, classified); never blocks on a hook or a POST."""
        decisions = PollDecisions([], [])
        with self._lock:
            if self._closed:
                return decisions
            now = self._clock()
            listed = {state.event.event_id: state for state in events}
            self._view.update(listed, vm_name, now)
            batch: list[PostItem] = []
            hooks = len(self._hooks)
            decisions.settled.extend(self._restored_unknown(listed, now))
            decisions.settled.extend(self._settle_posts(now))
            self._settle_hooks(listed, vm_name, now, batch, decisions.made)
            if not vm_name and not self._said_no_name:
                log.warning("approval: this VM's name is unknown (set --vm.name): approving nothing until it is known")
                self._said_no_name = True
            for state in events:
                self._consider(state, vm_name, now, batch, decisions.made)
            if batch:
                self._poster.submit(batch)
            pruned = prune_ledger(self._ledger, listed.keys(), now)
            if decisions.settled or decisions.made or batch or pruned or len(self._hooks) != hooks:
                self.state_version += 1
                self.approved = approved_times(self._ledger)
        return decisions

    def close(self, timeout: float) -> list[ApprovalDecision]:
        """Stop: kill running hooks, wait up to ``timeout`` for an in-flight POST and return its outcome
        (the owner saves ``rows`` after). A POST decided and not sent is saved as ``post_due``, one being sent
        as ``posting`` (``unknown`` after the restart)."""
        with self._lock:
            if self._closed:
                return []
            self._closed = True
            self._view.close()
        if self._hook_runner is not None:
            self._hook_runner.close()
        self._poster.wait(timeout)
        with self._lock:
            decisions = self._settle_posts(self._clock())
            self.state_version += 1
            self.approved = approved_times(self._ledger)
        self._poster.close()
        return decisions

    def _consider(
        self, state: EventState, vm_name: str | None, now: float, batch: list[PostItem], out: list[ApprovalDecision]
    ) -> None:
        event = state.event
        entry = self._ledger.get(event.event_id)
        if entry is not None:
            entry.last_seen = now
            if entry.status in (Result.APPROVED, Result.UNKNOWN, *IN_FLIGHT) or event.event_status != SCHEDULED:
                return  # final, in flight, or its approval story is over
        current = revision(entry, event)  # a hash, once per event object: only for events still to be decided
        if entry is not None and entry.revision == current and self._decided(entry, vm_name, now):
            return
        verdict = self._verdicts.decide(state, vm_name, now)
        if verdict.candidate:
            self._act(state, entry, current, verdict, vm_name, now, batch, out)
        elif not (
            entry is not None
            and entry.status == Result.SKIPPED
            and (entry.revision, entry.reason) == (current, verdict.reason)
        ):
            self._ledger[event.event_id] = new_entry(
                Result.SKIPPED, event, current, now, reason=verdict.reason, vm_name=vm_name
            )
            out.append(ApprovalDecision(event, Result.SKIPPED, "", f"{verdict.reason}: {verdict.detail}", None, now))
        else:  # the same skip as before: said once
            entry.vm_name = vm_name

    def _act(  # noqa: PLR0917 - one candidate's whole context
        self,
        state: EventState,
        entry: LedgerEntry | None,
        current: str,
        verdict: Verdict,
        vm_name: str | None,
        now: float,
        batch: list[PostItem],
        out: list[ApprovalDecision],
    ) -> None:
        """A candidate: expired, dry run, its hook started, or into this poll's POST."""
        event = state.event
        hook_passed = entry is not None and entry.revision == current and entry.status in (Result.FAILED, POST_DUE)
        attempts = entry.attempts if entry is not None and hook_passed else 0
        new = self._ledger[event.event_id] = new_entry(
            QUEUED, event, current, now, rule=verdict.rule, attempts=attempts
        )
        if (late := past_not_before(event, now)) is not None:
            new.status = Result.EXPIRED
            reason = f"{verdict.detail}, but NotBefore passed {late:.0f} s ago: Azure starts it anyway; nothing POSTed"
            out.append(ApprovalDecision(event, Result.EXPIRED, verdict.rule, reason, None, now))
        elif self._policy.dry_run:
            new.status = Result.DRY_RUN
            would = "run the hook, then POST" if self._policy.hook else "POST"
            reason = f"dry_run: {verdict.detail}; would {would} StartRequests"
            out.append(ApprovalDecision(event, Result.DRY_RUN, verdict.rule, reason, None, now))
        elif self._hook_runner is not None and not hook_passed:
            new.status = HOOK_RUNNING
            left = None if event.not_before is None else event.not_before.timestamp() - now
            classification = Classification(state.impact, state.cause)
            future = self._hook_runner.submit(
                event, vm_name or "", verdict.rule, classification=classification, seconds_left=left
            )
            self._hooks[event.event_id] = RunningHook(future, event, verdict.rule, current)
        else:
            why = f"{verdict.detail}; POST retry after {attempts} failure(s)" if hook_passed else verdict.detail
            batch.append(PostItem(event, verdict.rule, why, current))

    def _decided(self, entry: LedgerEntry, vm_name: str | None, now: float) -> bool:
        """Whether this revision's decision stands (nothing it depends on changed, no retry is due)."""
        if entry.status in (Result.DRY_RUN, Result.HOOK_FAILED, Result.EXPIRED):
            return True
        if entry.status == Result.FAILED:
            return entry.retry_at is None or now < entry.retry_at
        return entry.status == Result.SKIPPED and entry.vm_name == vm_name and self._verdicts.stable(entry.reason)

    def _settle_hooks(
        self,
        listed: Mapping[str, EventState],
        vm_name: str | None,
        now: float,
        batch: list[PostItem],
        out: list[ApprovalDecision],
    ) -> None:
        for event_id, job in list(self._hooks.items()):
            if not job.future.done():
                continue
            del self._hooks[event_id]
            decision, item = settle_hook(
                job, self._ledger[event_id], listed.get(event_id), vm_name=vm_name, now=now, verdicts=self._verdicts
            )
            if decision is not None:
                out.append(decision)
            if item is not None:
                batch.append(item)

    def _restored_unknown(self, listed: Mapping[str, EventState], now: float) -> list[ApprovalDecision]:
        """The POSTs that were being sent when the exporter died, said once: their outcome is unknown."""
        decisions = []
        for event_id in self._unknown:
            entry = self._ledger.get(event_id)
            if entry is None:
                continue
            state = listed.get(event_id)
            event = state.event if state is not None else ScheduledEvent(event_id, entry.event_type, "")
            reason = (
                "unknown: the exporter stopped while its POST StartRequests was being sent; not sent again "
                "(at most once)"
            )
            decisions.append(ApprovalDecision(event, Result.UNKNOWN, entry.rule, reason, None, now))
            entry.reason, entry.decided_at = "", now
        self._unknown = []
        return decisions

    def _settle_posts(self, now: float) -> list[ApprovalDecision]:
        # A batch never sent (shut down) stays QUEUED (saved as post_due), one being sent POSTING.
        return [
            decision
            for outcome in self._poster.done()
            for decision in settle_post(outcome, self._ledger, self._view.events, now)
        ]

    def _recheck(self, items: tuple[PostItem, ...]) -> tuple[list[tuple[str, PostItem]], list[Any]]:
        """Before a POST attempt (on the poster's thread): the entries saved as being sent, on disk, then a
        fresh decision on the latest document. A crash after the commit and before the answer leaves them
        ``unknown``: never sent again."""
        with self._lock:
            for item in items:
                if (entry := self._ledger.get(item.event.event_id)) is not None and entry.status == QUEUED:
                    entry.status = POSTING
            self.state_version += 1
        # Asked after the change and outside the lock: the flush that takes the request reads the rows after
        # it, and a flush holds the persistence's lock while it asks for this approver's (never the reverse).
        committed = self._commit_requested()
        try:  # the disk, waited for without the lock: never the poll
            committed.result(SAVED_WAIT_SECONDS)
            saved = True
        except (FutureTimeout, CancelledError):
            saved = False
        with self._lock:
            if not saved:
                why = f"{STATE_UNSAVED}: the POST could not be saved as being sent first; not POSTed"
                return [], [Dropped(item, Result.SKIPPED, why) for item in items]
            self._view.wait_fresh()  # never on what was seen before a pause of the process
            return recheck(items, self._view.events, self._view.vm_name, self._clock(), self._verdicts)


def _committed() -> Future[None]:
    """Without a state file: nothing to wait for."""
    future: Future[None] = Future()
    future.set_result(None)
    return future
