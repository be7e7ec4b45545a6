"""The approver: turns each poll's events into audited approval decisions, never blocking the poll.

``on_poll`` runs in the poll thread and only decides and bookkeeps; it returns the decisions it made,
which the poller hands to every sink with the poll's transitions. Hooks run on the hook runner's
thread; POSTs run on one dedicated background thread, because the IMDS client's own backoff on
5xx/429 can take many seconds and the poll loop must keep observing meanwhile. Results are picked up
on the next ``on_poll`` (or ``close``). Before every POST attempt the poster asks ``_recheck`` for a
fresh decision on the latest document, so nothing is POSTed for an event that stopped qualifying.

Semantics (see docs/approval.md):

- ``approved`` is final: an EventId is approved at most once, also across restarts (``to_state``).
- Candidates whose hook passed (or with no hook) in the same poll share one POST.
- ``dry_run``, ``hook_failed`` and ``expired`` are redone only when the event changes
  (``event_revision``: a new NotBefore is a change), or after a restart with a different policy.
- Nothing is approved after NotBefore (Azure starts the event then anyway): a candidate whose NotBefore
  has passed, or whose hook was still running at NotBefore, is ``expired``, and nothing is POSTed.
- ``failed`` (the poster's own attempts, ``PostRetry``, were exhausted): retried on later polls after
  ``retry_delays`` (15 s, 60 s: at most three batches per revision), if still approvable, without
  re-running the hook; not retried when the error is not retryable (400). A new revision starts afresh.
- ``skipped`` is logged once per event, again when the event or the skip reason changes. An event first
  seen Started gets one ``not_scheduled`` skip; an event that leaves Scheduled later gets none.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from se_exporter.approval.decision import ApprovalDecision
from se_exporter.approval.decision import ApprovalResult as Result
from se_exporter.approval.hook import HookResult, HookRunner, HookSubmitter
from se_exporter.approval.ledger import (
    HOOK_RUNNING,
    POST_DUE,
    POSTING,
    LedgerEntry,
    dump_ledger,
    event_revision,
    load_ledger,
)
from se_exporter.approval.policy import NO_RULE, NOT_LEADER, NOT_SCHEDULED, NOT_THIS_VM, Policy, Verdict
from se_exporter.approval.poster import BackgroundPoster, Dropped, PostOutcome, PostRetry, PostStartRequests
from se_exporter.imds.changes import describe_change
from se_exporter.imds.document import MAX_EVENTS, SCHEDULED, ScheduledEvent
from se_exporter.imds.impact import Classification
from se_exporter.store import EventState

log = logging.getLogger("se_exporter.approval")

POST_RETRY_DELAYS_SECONDS = (15.0, 60.0)
# How long a decision on an event no longer listed is remembered: an approval for a week (an EventId that
# comes back is never approved twice), anything else briefly (an IMDS glitch that listed nothing).
RETENTION_SECONDS = 7 * 24 * 3600.0
OTHER_RETENTION_SECONDS = 600.0
# The ledger's bound (and its share of the state file): twice the events a document may list. Past it,
# decisions on events no longer listed are forgotten oldest first, approvals last.
MAX_LEDGER_ENTRIES = 2 * MAX_EVENTS
NOT_LISTED = "not_listed"  # skip reason when an event disappears while its hook runs
# Skip reason when the event changed (another revision: Resources, type, NotBefore…) after the policy matched
# it and its hook ran, before the POST: an approval is for exactly what was decided, so it is decided again.
CHANGED = "changed"
STABLE_SKIPS = frozenset({NOT_SCHEDULED, NOT_THIS_VM, NOT_LEADER})  # hold until the event or the VM name changes
STATE_UNSAVED = "state_unsaved"  # skip reason while the state file cannot be saved (see ``can_remember``)


@dataclass(frozen=True, slots=True)
class _Item:
    event: ScheduledEvent  # the revision the policy matched (and the hook ran on): only this one is POSTed
    rule: str
    why: str
    revision: str


@dataclass(frozen=True, slots=True)
class _Hooking:
    future: Future[HookResult]
    event: ScheduledEvent
    rule: str
    revision: str  # the event as the hook saw it


class Approver:
    def __init__(
        self,
        policy: Policy,
        post_start_requests: PostStartRequests,
        *,
        hook_runner: HookSubmitter | None = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        retry_delays: Sequence[float] = POST_RETRY_DELAYS_SECONDS,
        retention_seconds: float = RETENTION_SECONDS,
        post_retry: PostRetry | None = None,
        can_remember: Callable[[], bool] = lambda: True,
    ) -> None:
        self._policy = policy
        if hook_runner is None and policy.hook is not None and not policy.dry_run:
            hook_runner = HookRunner(policy.hook)
        self._hook_runner = hook_runner
        self._clock = clock
        self._retry_delays = tuple(retry_delays)
        self._retention = retention_seconds
        # False while the state file cannot be saved: an approval made then would be forgotten by a
        # restart, which would approve (and run the hook) again. Nothing is started until it can.
        self._can_remember = can_remember
        self._ledger: dict[str, LedgerEntry] = {}
        self._hooks: dict[str, _Hooking] = {}
        self._poster: BackgroundPoster[_Item] = BackgroundPoster(post_start_requests, self._recheck, post_retry,
                                                                 monotonic)
        self._lock = threading.Lock()
        self._latest: Mapping[str, EventState] = {}  # the last poll's events, for the poster's rechecks
        self._vm_name: str | None = None
        self._said_no_name = False
        self._closed = False
        self.state_version = 0  # moves whenever to_state() would save something new (state.persistence)

    @classmethod
    def from_state(
        cls, section: object, policy: Policy, post_start_requests: PostStartRequests, **kwargs: Any
    ) -> Approver:
        """An approver that remembers the decisions ``to_state`` saved (``ValueError`` if the section is
        damaged). With a different policy only ``approved`` is kept: the rest is decided again."""
        approver = cls(policy, post_start_requests, **kwargs)
        if section is None:
            return approver
        entries, fingerprint = load_ledger(section)
        if fingerprint != policy.fingerprint:
            forgotten = sum(entry.status != Result.APPROVED for entry in entries.values())
            entries = {key: entry for key, entry in entries.items() if entry.status == Result.APPROVED}
            if forgotten:
                log.info("approval policy changed since the state was saved: deciding %d event(s) again", forgotten)
        approver._ledger = entries
        return approver

    def to_state(self) -> dict[str, object]:
        """The decisions to keep across a restart (see ``approval.ledger`` for the format)."""
        with self._lock:
            return dump_ledger(self._ledger, self._policy.fingerprint)

    @property
    def busy(self) -> bool:
        """True while a hook or a POST is still running (the next ``on_poll`` picks up finished ones)."""
        with self._lock:
            return self._poster.running or any(not job.future.done() for job in self._hooks.values())

    def on_poll(self, events: Sequence[EventState], vm_name: str | None) -> list[ApprovalDecision]:
        """Decide on this poll's listed events (the store's, classified) and return the decisions made;
        never blocks on a hook or a POST."""
        decisions: list[ApprovalDecision] = []
        with self._lock:
            if self._closed:
                return decisions
            now = self._clock()
            listed = {state.event.event_id: state for state in events}
            self._latest, self._vm_name = listed, vm_name
            batch: list[_Item] = []
            hooks = len(self._hooks)
            self._finish_posts(now, decisions)
            self._finish_hooks(listed, vm_name, now, batch, decisions)
            if not vm_name and not self._said_no_name:
                log.warning("approval: this VM's name is unknown (set --vm.name): approving nothing until it is known")
                self._said_no_name = True
            for state in events:
                self._consider(state, vm_name, now, batch, decisions)
            if batch:
                self._poster.submit(batch)
            pruned = self._prune(listed, now)
            if decisions or batch or pruned or len(self._hooks) != hooks:
                self.state_version += 1
        return decisions

    def close(self, timeout: float = 10.0) -> list[ApprovalDecision]:
        """Stop: kill running hooks, wait up to ``timeout`` for an in-flight POST and return its outcome
        (the owner saves ``to_state`` after). A POST still in flight is saved as ``post_due``."""
        decisions: list[ApprovalDecision] = []
        with self._lock:
            if self._closed:
                return decisions
            self._closed = True
        if self._hook_runner is not None:
            self._hook_runner.close()
        self._poster.wait(timeout)
        with self._lock:
            self._finish_posts(self._clock(), decisions)
            self.state_version += 1
        self._poster.close()
        return decisions

    def _consider(
        self, state: EventState, vm_name: str | None, now: float, batch: list[_Item], out: list[ApprovalDecision]
    ) -> None:
        event = state.event
        entry = self._ledger.get(event.event_id)
        if entry is not None:
            entry.last_seen = now
            if entry.status in (Result.APPROVED, HOOK_RUNNING, POSTING) or event.event_status != SCHEDULED:
                return  # final, in flight, or its approval story is over
        revision = _revision(entry, event)  # a hash, once per event object: only for events still to be decided
        if entry is not None:
            same = entry.revision == revision
            if same and entry.status in (Result.DRY_RUN, Result.HOOK_FAILED, Result.EXPIRED):
                return
            if same and entry.status == Result.FAILED and (entry.retry_at is None or now < entry.retry_at):
                return
            if same and entry.status == Result.SKIPPED and entry.vm_name == vm_name and self._stable(entry.reason):
                return  # nothing the skip depends on has changed: not decided again at every poll
        verdict = self._decide(state, vm_name, now)
        if not verdict.candidate:
            said = entry is not None and entry.status == Result.SKIPPED and entry.revision == revision
            if said and entry is not None and entry.reason == verdict.reason:
                entry.vm_name = vm_name
                return
            entry = LedgerEntry(Result.SKIPPED, revision, reason=verdict.reason, decided_at=now, last_seen=now,
                                vm_name=vm_name, seen=event, seen_revision=revision)
            self._ledger[event.event_id] = entry
            out.append(ApprovalDecision(event, Result.SKIPPED, "", f"{verdict.reason}: {verdict.detail}", None, now))
            return
        hook_passed = entry is not None and entry.revision == revision and entry.status in (Result.FAILED, POST_DUE)
        attempts = entry.attempts if entry is not None and hook_passed else 0
        new = LedgerEntry(POSTING, revision, verdict.rule, attempts=attempts, decided_at=now, last_seen=now,
                          seen=event, seen_revision=revision)
        self._ledger[event.event_id] = new
        if (late := _past_not_before(event, now)) is not None:
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
            future = self._hook_runner.submit(event, vm_name or "", verdict.rule,  # a candidate has a VM name
                                              classification=Classification(state.impact, state.cause),
                                              seconds_left=left)
            self._hooks[event.event_id] = _Hooking(future, event, verdict.rule, revision)
        else:
            why = f"{verdict.detail}; POST retry after {attempts} failure(s)" if hook_passed else verdict.detail
            batch.append(_Item(event, verdict.rule, why, revision))

    def _finish_hooks(
        self,
        listed: Mapping[str, EventState],
        vm_name: str | None,
        now: float,
        batch: list[_Item],
        out: list[ApprovalDecision],
    ) -> None:
        for event_id, job in list(self._hooks.items()):
            if not job.future.done():
                continue
            del self._hooks[event_id]
            result = _hook_result(job.future)
            entry = self._ledger[event_id]
            if result.expired:
                entry.status = Result.EXPIRED
                reason = f"hook {result.summary}: Azure starts the event anyway; nothing POSTed"
                out.append(ApprovalDecision(job.event, Result.EXPIRED, job.rule, reason, None, now))
                continue
            if not result.ok:
                entry.status = Result.HOOK_FAILED
                last = f"; last output: {result.last_output}" if result.last_output else ""
                reason = f"hook {result.summary}{last}; not retried until the event changes"
                out.append(ApprovalDecision(job.event, Result.HOOK_FAILED, job.rule, reason, None, now))
                continue
            # Re-decide on the event as it is now: it may have started, moved, changed or gone while the hook ran.
            state = listed.get(event_id)
            if state is None:
                entry.status, entry.reason = Result.SKIPPED, NOT_LISTED
                reason = f"{NOT_LISTED}: the event is gone (after the hook {result.summary})"
                out.append(ApprovalDecision(job.event, Result.SKIPPED, job.rule, reason, None, now))
                continue
            current, verdict = state.event, self._decide(state, vm_name, now)
            if not verdict.candidate:
                entry.status, entry.reason, entry.revision = Result.SKIPPED, verdict.reason, event_revision(current)
                reason = f"{verdict.reason}: {verdict.detail} (after the hook {result.summary})"
                out.append(ApprovalDecision(current, Result.SKIPPED, job.rule, reason, None, now))
                continue
            if (revision := event_revision(current)) != job.revision:
                # The hook prepared for another version of the event (fewer Resources, another type…): the
                # entry keeps the old revision, so this poll's _consider decides on the new one afresh.
                entry.status, entry.reason = Result.SKIPPED, CHANGED
                reason = f"{CHANGED}: {describe_change(job.event, current)} while its hook ran; deciding again"
                out.append(ApprovalDecision(current, Result.SKIPPED, job.rule, reason, None, now))
                continue
            entry.rule = verdict.rule
            if (late := _past_not_before(current, now)) is not None:
                entry.status = Result.EXPIRED
                reason = f"hook {result.summary}, but NotBefore passed {late:.0f} s ago; nothing POSTed"
                out.append(ApprovalDecision(current, Result.EXPIRED, verdict.rule, reason, None, now))
                continue
            entry.status = POSTING
            batch.append(_Item(current, verdict.rule, f"{verdict.detail}; hook {result.summary}", revision))

    def _stable(self, reason: str) -> bool:
        """Whether a skip for ``reason`` holds until the event or this VM's name changes (the time aside)."""
        return reason in STABLE_SKIPS or (reason == NO_RULE and not self._policy.time_dependent)

    def _decide(self, state: EventState, vm_name: str | None, now: float) -> Verdict:
        """The policy's verdict on a listed event, with its impact and cause; no candidate while the state
        file cannot be saved. Every decision (first, after a hook, before each POST attempt) is this one."""
        verdict = self._policy.decide(state.event, vm_name, now, Classification(state.impact, state.cause))
        if verdict.candidate and not self._can_remember():
            return Verdict(False, reason=STATE_UNSAVED, detail=f"{verdict.detail}, but the state file cannot be "
                           "saved: approving now could approve twice after a restart")
        return verdict

    def _recheck(self, items: tuple[_Item, ...]) -> tuple[list[tuple[str, _Item]], list[Dropped[_Item]]]:
        """A fresh decision on the latest document before a POST attempt (called on the poster's thread):
        only the revision that was decided (and that the hook ran on) may be POSTed."""
        keep: list[tuple[str, _Item]] = []
        dropped: list[Dropped[_Item]] = []
        with self._lock:
            now = self._clock()
            for item in items:
                state = self._latest.get(item.event.event_id)
                if state is None:
                    dropped.append(Dropped(item, Result.SKIPPED, f"{NOT_LISTED}: the event is gone"))
                    continue
                verdict, revision = self._decide(state, self._vm_name, now), event_revision(state.event)
                as_now = _Item(state.event, item.rule, item.why, revision)  # the skip is about this revision
                if not verdict.candidate:
                    dropped.append(Dropped(as_now, Result.SKIPPED, f"{verdict.reason}: {verdict.detail}"))
                elif revision != item.revision:  # kept with the decided revision: the next poll decides afresh
                    change = describe_change(item.event, state.event)
                    dropped.append(Dropped(item, Result.SKIPPED, f"{CHANGED}: {change}; deciding again"))
                elif (late := _past_not_before(state.event, now)) is not None:
                    dropped.append(Dropped(item, Result.EXPIRED, f"NotBefore passed {late:.0f} s ago: Azure starts "
                                                                 "it anyway; nothing POSTed"))
                else:
                    keep.append((state.event.event_id, _Item(state.event, verdict.rule, item.why, item.revision)))
        return keep, dropped

    def _finish_posts(self, now: float, out: list[ApprovalDecision]) -> None:
        for outcome in self._poster.done():  # a batch never sent (shut down) stays POSTING: saved as post_due
            self._finish_dropped(outcome, now, out)
            latency, error = outcome.latency_seconds, outcome.error
            together = f" (one request for {len(outcome.items)} events)" if len(outcome.items) > 1 else ""
            tries = f" at attempt {outcome.attempts}" if outcome.attempts > 1 else ""
            for item in outcome.items:
                entry = self._ledger[item.event.event_id]
                entry.decided_at = now
                if error is None:
                    entry.status = Result.APPROVED
                    reason = f"{item.why}; POST StartRequests succeeded{tries}{together}"
                    out.append(ApprovalDecision(item.event, Result.APPROVED, item.rule, reason, latency, now))
                    continue
                entry.status = Result.FAILED
                entry.attempts += 1
                retry = bool(getattr(error, "retryable", False)) and entry.attempts <= len(self._retry_delays)
                if retry:
                    delay = self._retry_delays[entry.attempts - 1]
                    entry.retry_at = now + delay
                    then = f"POST retry {entry.attempts}/{len(self._retry_delays)} in {delay:g} s if still approvable"
                else:
                    entry.retry_at = None
                    then = "not retried until the event changes"
                reason = (f"POST StartRequests failed{together} after {outcome.attempts} attempt(s): "
                          f"{type(error).__name__}: {error}; {then}")
                out.append(ApprovalDecision(item.event, Result.FAILED, item.rule, reason, latency, now))

    def _finish_dropped(self, outcome: PostOutcome[_Item], now: float, out: list[ApprovalDecision]) -> None:
        """Items a recheck took out of a batch: skipped (no longer approvable) or expired, never POSTed."""
        for gone in outcome.dropped:
            item = gone.item
            entry = self._ledger[item.event.event_id]
            entry.decided_at = now
            entry.revision = item.revision  # after a change, the decided one: the next poll decides afresh
            result = Result(gone.result)
            entry.status, entry.reason = result, gone.reason.split(":", 1)[0]
            reason = f"{gone.reason} (decided again before POST attempt {outcome.attempts + 1})"
            current = self._latest.get(item.event.event_id)
            shown = current.event if current is not None else item.event
            out.append(ApprovalDecision(shown, result, item.rule, reason, None, now))

    def _prune(self, listed: Mapping[str, EventState], now: float) -> bool:
        """Forget decisions on events gone: skips at once, approvals after ``retention``, the rest after
        ``OTHER_RETENTION_SECONDS``, and past ``MAX_LEDGER_ENTRIES`` the oldest; True if any."""
        gone = [event_id for event_id, entry in self._ledger.items()
                if event_id not in listed and entry.status not in (HOOK_RUNNING, POSTING)]
        forget = {event_id for event_id in gone if self._expired(self._ledger[event_id], now)}
        if (excess := len(self._ledger) - len(forget) - MAX_LEDGER_ENTRIES) > 0:
            kept = sorted((event_id for event_id in gone if event_id not in forget), key=lambda event_id: (
                self._ledger[event_id].status == Result.APPROVED, self._ledger[event_id].last_seen))
            forget.update(kept[:excess])
        for event_id in forget:
            del self._ledger[event_id]
        return bool(forget)

    def _expired(self, entry: LedgerEntry, now: float) -> bool:
        if entry.status == Result.SKIPPED:
            return True
        retention = self._retention if entry.status == Result.APPROVED else min(self._retention,
                                                                                 OTHER_RETENTION_SECONDS)
        return now - entry.last_seen > retention


def _revision(entry: LedgerEntry | None, event: ScheduledEvent) -> str:
    """``event_revision(event)``, computed once per event object (the store hands back the same one while
    the event is unchanged)."""
    if entry is not None and entry.seen is event:
        return entry.seen_revision
    revision = event_revision(event)
    if entry is not None:
        entry.seen, entry.seen_revision = event, revision
    return revision


def _past_not_before(event: ScheduledEvent, now: float) -> float | None:
    """Seconds since the event's NotBefore, or None while it is still ahead (or the event has none)."""
    if event.not_before is None or (late := now - event.not_before.timestamp()) < 0:
        return None
    return late


def _hook_result(future: Future[HookResult]) -> HookResult:
    if future.cancelled():
        return HookResult(exit_code=None, timed_out=False, duration_seconds=0.0, summary="was cancelled")
    error = future.exception()
    if error is not None:
        return HookResult(exit_code=None, timed_out=False, duration_seconds=0.0, summary=f"runner error: {error!r}")
    return future.result()
