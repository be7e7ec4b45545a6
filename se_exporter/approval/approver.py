"""The approver: turns each poll's events into audited approval decisions, never blocking the poll.

``on_poll`` runs in the poll thread and only decides and bookkeeps; it returns the decisions in the
order things happened: those that settle work finished before this document was read (a POST's
outcome), then those made on this document, which the poller writes after the document's own
transitions. Hooks run on the hook runner's thread; POSTs on one background thread (the poster),
because retries take seconds and the poll loop must keep observing meanwhile. What they come to is
settled by ``approval/settling.py``, every decision is the judge's (``approval/judge.py``).

Its semantics (``approved`` is final; one POST per poll for every candidate; a change means a new decision;
nothing approved after NotBefore; retries of ``failed``; at most once across crashes: a POST is saved as
being sent before it leaves, and one saved so and never settled is ``unknown`` after a restart, never sent
again) are in full in docs/approval.md.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import CancelledError, Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, NamedTuple

from se_exporter.approval.decision import ApprovalDecision
from se_exporter.approval.decision import ApprovalResult as Result
from se_exporter.approval.hook import HookRunner, HookSubmitter
from se_exporter.approval.judge import STATE_UNSAVED, Judge, past_not_before, revision
from se_exporter.approval.ledger import (
    HOOK_RUNNING,
    IN_FLIGHT,
    POST_DUE,
    POSTING,
    QUEUED,
    RETENTION_SECONDS,
    LedgerEntry,
    approved_times,
    dump_ledger,
    new_entry,
    prune_ledger,
    restore_ledger,
)
from se_exporter.approval.policy import Policy, Verdict
from se_exporter.approval.poster import BackgroundPoster, Dropped, PostRetry, PostStartRequests
from se_exporter.approval.settling import Hooking, Item, recheck, settle_hook, settle_post
from se_exporter.approval.view import SAVED_WAIT_SECONDS, LatestView
from se_exporter.durable.persistence import Tables
from se_exporter.imds.document import SCHEDULED, ScheduledEvent
from se_exporter.imds.impact import Classification
from se_exporter.lifecycle.transitions import EventState

log = logging.getLogger("se_exporter.approval")

POST_RETRY_DELAYS_SECONDS = (15.0, 60.0)


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
        retry_delays: Sequence[float] = POST_RETRY_DELAYS_SECONDS,
        retention_seconds: float = RETENTION_SECONDS,
        post_retry: PostRetry | None = None,
        can_remember: Callable[[], bool] = lambda: True,
        fresh_within: float = 5.0,  # a POST waits for a look this young (approval/view.py)
        pace: Callable[[], None] = lambda: None,  # waits for a POST's request slot, before its recheck
        # The future of a commit carrying every change made so far (durable.persistence: commit_requested).
        commit_requested: Callable[[], Future[None]] | None = None,
        ledger: Mapping[str, LedgerEntry] | None = None,  # decisions restored from the state file
    ) -> None:
        self._policy = policy
        self._judge = Judge(policy, can_remember)
        if hook_runner is None and policy.hook is not None and not policy.dry_run:
            hook_runner = HookRunner(policy.hook)
        self._hook_runner = hook_runner
        self._clock = clock
        self._retry_delays = tuple(retry_delays)
        self._retention = retention_seconds
        self._ledger: dict[str, LedgerEntry] = dict(ledger or {})
        self._hooks: dict[str, Hooking] = {}
        self._poster: BackgroundPoster[Item] = BackgroundPoster(
            post_start_requests, self._recheck, post_retry, monotonic, pace
        )
        self._lock = threading.Lock()
        self._commit_requested = commit_requested or _committed
        self._view = LatestView(self._lock, fresh_within, clock, monotonic)  # for the poster
        # POSTs that were being sent when the exporter died: said once, at the first poll, as ``unknown``.
        self._unknown = [key for key, entry in self._ledger.items() if entry.status == Result.UNKNOWN and entry.reason]
        self._said_no_name = False
        self._closed = False
        self.approved: Mapping[str, float] = approved_times(self._ledger)  # replaced whole, read by /metrics
        self.state_version = 0  # moves whenever to_state() would save something new (durable.persistence)

    @classmethod
    def from_rows(
        cls, tables: Tables, policy: Policy, post_start_requests: PostStartRequests, **kwargs: Any
    ) -> Approver:
        """An approver that remembers the decisions ``rows`` saved (``ValueError`` if a row is damaged).
        With a different policy only final ones are kept: the rest is decided again."""
        return cls(policy, post_start_requests, ledger=restore_ledger(tables, policy.fingerprint), **kwargs)

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
            batch: list[Item] = []
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
            pruned = prune_ledger(self._ledger, listed.keys(), now, self._retention)
            if decisions.settled or decisions.made or batch or pruned or len(self._hooks) != hooks:
                self.state_version += 1
                self.approved = approved_times(self._ledger)
        return decisions

    def close(self, timeout: float = 10.0) -> list[ApprovalDecision]:
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
        self, state: EventState, vm_name: str | None, now: float, batch: list[Item], out: list[ApprovalDecision]
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
        verdict = self._judge.decide(state, vm_name, now)
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
        batch: list[Item],
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
            self._hooks[event.event_id] = Hooking(future, event, verdict.rule, current)
        else:
            why = f"{verdict.detail}; POST retry after {attempts} failure(s)" if hook_passed else verdict.detail
            batch.append(Item(event, verdict.rule, why, current))

    def _decided(self, entry: LedgerEntry, vm_name: str | None, now: float) -> bool:
        """Whether this revision's decision stands (nothing it depends on changed, no retry is due)."""
        if entry.status in (Result.DRY_RUN, Result.HOOK_FAILED, Result.EXPIRED):
            return True
        if entry.status == Result.FAILED:
            return entry.retry_at is None or now < entry.retry_at
        return entry.status == Result.SKIPPED and entry.vm_name == vm_name and self._judge.stable(entry.reason)

    def _settle_hooks(
        self,
        listed: Mapping[str, EventState],
        vm_name: str | None,
        now: float,
        batch: list[Item],
        out: list[ApprovalDecision],
    ) -> None:
        for event_id, job in list(self._hooks.items()):
            if not job.future.done():
                continue
            del self._hooks[event_id]
            decision, item = settle_hook(
                job, self._ledger[event_id], listed.get(event_id), vm_name=vm_name, now=now, judge=self._judge
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
            for decision in settle_post(outcome, self._ledger, self._view.events, now, self._retry_delays)
        ]

    def _recheck(self, items: tuple[Item, ...]) -> tuple[list[tuple[str, Item]], list[Any]]:
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
            return recheck(items, self._view.events, self._view.vm_name, self._clock(), self._judge)


def _committed() -> Future[None]:
    """Without a state file: nothing to wait for."""
    future: Future[None] = Future()
    future.set_result(None)
    return future
