"""The approver: turns each poll's events into audited approval decisions, never blocking the poll.

``on_poll`` runs in the poll thread and only decides and bookkeeps. Hooks run on the hook runner's
thread; POSTs run on one dedicated background thread, because the IMDS client's own backoff on
5xx/429 can take many seconds and the poll loop must keep observing meanwhile. Results are picked up
on the next ``on_poll`` (or ``close``), so ``emit_decision`` is called from the poll thread only.

Semantics (see README-approval.md):

- ``approved`` is final: an EventId is approved at most once, also across restarts (``to_state``).
- Candidates whose hook passed (or with no hook) in the same poll share one POST.
- ``dry_run`` and ``hook_failed`` are redone only when the event changes (``event_revision``), or
  after a restart with a different policy.
- ``failed`` (the client gave up): retried on later polls after ``retry_delays`` (15 s, 60 s: at most
  three POSTs per revision), if still approvable, without re-running the hook; not retried when the
  error is not retryable (400). A new revision starts afresh.
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

from se_exporter.approval.hook import HookResult, HookRunner, HookSubmitter
from se_exporter.approval.policy import Policy
from se_exporter.approval.poster import BackgroundPoster, PostStartRequests
from se_exporter.approval.state import (
    APPROVED,
    DRY_RUN,
    FAILED,
    HOOK_FAILED,
    HOOK_RUNNING,
    POST_DUE,
    POSTING,
    SKIPPED,
    Record,
    dump_records,
    event_revision,
    load_records,
)
from se_exporter.imds.document import STATUS_SCHEDULED, ScheduledEvent

log = logging.getLogger("se_exporter.approval")

POST_RETRY_DELAYS_SECONDS = (15.0, 60.0)
RETENTION_SECONDS = 7 * 24 * 3600.0  # how long decisions on events no longer listed are remembered
NOT_LISTED = "not_listed"  # skip reason when an event disappears while its hook runs


@dataclass(frozen=True, slots=True)
class ApprovalDecision:
    event: ScheduledEvent
    result: str  # approved | dry_run | failed | hook_failed | skipped
    rule: str  # the matching rule ("" for most skips)
    reason: str  # "<code or what happened>: <details>"
    post_latency_seconds: float | None  # approved/failed: the POST call, including the client's retries
    at: float  # Unix time of the decision

    @property
    def counted(self) -> bool:
        """True when it counts in approvals_total (everything but ``skipped``)."""
        return self.result != SKIPPED


@dataclass(frozen=True, slots=True)
class _Item:
    event: ScheduledEvent
    rule: str
    why: str


@dataclass(frozen=True, slots=True)
class _Hooking:
    future: Future[HookResult]
    event: ScheduledEvent
    rule: str


class Approver:
    def __init__(
        self,
        policy: Policy,
        post_start_requests: PostStartRequests,
        emit_decision: Callable[[ApprovalDecision], None],
        *,
        hook_runner: HookSubmitter | None = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        retry_delays: Sequence[float] = POST_RETRY_DELAYS_SECONDS,
        retention_seconds: float = RETENTION_SECONDS,
    ) -> None:
        self._policy = policy
        self._emit_decision = emit_decision
        if hook_runner is None and policy.hook is not None and not policy.dry_run:
            hook_runner = HookRunner(policy.hook)
        self._hook_runner = hook_runner
        self._clock = clock
        self._retry_delays = tuple(retry_delays)
        self._retention = retention_seconds
        self._records: dict[str, Record] = {}
        self._hooks: dict[str, _Hooking] = {}
        self._poster: BackgroundPoster[_Item] = BackgroundPoster(post_start_requests, monotonic)
        self._lock = threading.Lock()
        self._said_no_name = False
        self._closed = False

    @classmethod
    def from_state(
        cls,
        state: Mapping[str, Any],
        policy: Policy,
        post_start_requests: PostStartRequests,
        emit_decision: Callable[[ApprovalDecision], None],
        **kwargs: Any,
    ) -> Approver:
        """An approver that remembers ``to_state``'s decisions; raises ``ValueError`` on a malformed state.
        With a different policy, only ``approved`` is kept: the rest is decided again under the new one."""
        records, fingerprint = load_records(state)
        approver = cls(policy, post_start_requests, emit_decision, **kwargs)
        if fingerprint != policy.fingerprint:
            forgotten = sum(record.status != APPROVED for record in records.values())
            records = {key: record for key, record in records.items() if record.status == APPROVED}
            if forgotten:
                log.info("approval policy changed since the state was saved: deciding %d event(s) again", forgotten)
        approver._records = records
        return approver

    def to_state(self) -> dict[str, object]:
        """JSON-safe decisions to persist (see ``se_exporter.approval.state`` for the format)."""
        with self._lock:
            return dump_records(self._records, self._policy.fingerprint)

    @property
    def busy(self) -> bool:
        """True while a hook or a POST is still running (the next ``on_poll`` picks up finished ones)."""
        with self._lock:
            return self._poster.running or any(not job.future.done() for job in self._hooks.values())

    def on_poll(self, events: Sequence[ScheduledEvent], vm_name: str | None) -> None:
        """Decide on this poll's events; never blocks on a hook or a POST."""
        decisions: list[ApprovalDecision] = []
        with self._lock:
            if self._closed:
                return
            now = self._clock()
            listed = {event.event_id: event for event in events}
            batch: list[_Item] = []
            self._finish_posts(now, decisions)
            self._finish_hooks(listed, vm_name, now, batch, decisions)
            if not vm_name and not self._said_no_name:
                log.warning("approval: this VM's name is unknown (set --vm.name): approving nothing until it is known")
                self._said_no_name = True
            for event in events:
                self._consider(event, vm_name, now, batch, decisions)
            if batch:
                self._poster.submit([item.event.event_id for item in batch], batch)
            self._prune(listed, now)
        for decision in decisions:
            self._emit(decision)

    def close(self, timeout: float = 10.0) -> None:
        """Stop: kill running hooks, wait up to ``timeout`` for an in-flight POST and record its outcome
        (then persist ``to_state``). A POST still in flight is saved as ``post_due``."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        if self._hook_runner is not None:
            self._hook_runner.close()
        self._poster.wait(timeout)
        decisions: list[ApprovalDecision] = []
        with self._lock:
            self._finish_posts(self._clock(), decisions)
        self._poster.close()
        for decision in decisions:
            self._emit(decision)

    def _consider(
        self, event: ScheduledEvent, vm_name: str | None, now: float, batch: list[_Item], out: list[ApprovalDecision]
    ) -> None:
        record = self._records.get(event.event_id)
        if record is not None:
            record.last_seen = now
            if record.status in (APPROVED, HOOK_RUNNING, POSTING) or event.event_status != STATUS_SCHEDULED:
                return  # final, in flight, or its approval story is over
        revision = event_revision(event)  # a hash: only for events still to be decided
        if record is not None:
            same = record.revision == revision
            if same and record.status in (DRY_RUN, HOOK_FAILED):
                return
            if same and record.status == FAILED and (record.retry_at is None or now < record.retry_at):
                return
        decision = self._policy.decide(event, vm_name, now)
        if not decision.candidate:
            if record and record.status == SKIPPED and record.revision == revision and record.reason == decision.reason:
                return
            record = Record(SKIPPED, revision, reason=decision.reason, decided_at=now, last_seen=now)
            self._records[event.event_id] = record
            out.append(ApprovalDecision(event, SKIPPED, "", f"{decision.reason}: {decision.detail}", None, now))
            return
        hook_passed = record is not None and record.revision == revision and record.status in (FAILED, POST_DUE)
        attempts = record.attempts if record is not None and hook_passed else 0
        new = Record(POSTING, revision, decision.rule, attempts=attempts, decided_at=now, last_seen=now)
        self._records[event.event_id] = new
        if self._policy.dry_run:
            new.status = DRY_RUN
            would = "run the hook, then POST" if self._policy.hook else "POST"
            reason = f"dry_run: {decision.detail}; would {would} StartRequests"
            out.append(ApprovalDecision(event, DRY_RUN, decision.rule, reason, None, now))
        elif self._hook_runner is not None and not hook_passed:
            assert vm_name is not None  # a candidate implies a known VM name
            new.status = HOOK_RUNNING
            future = self._hook_runner.submit(event, vm_name, decision.rule)
            self._hooks[event.event_id] = _Hooking(future, event, decision.rule)
        else:
            why = f"{decision.detail}; POST retry after {attempts} failure(s)" if hook_passed else decision.detail
            batch.append(_Item(event, decision.rule, why))

    def _finish_hooks(
        self,
        listed: Mapping[str, ScheduledEvent],
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
            record = self._records[event_id]
            if not result.ok:
                record.status = HOOK_FAILED
                last = f"; last output: {result.last_output}" if result.last_output else ""
                reason = f"hook {result.summary}{last}; not retried until the event changes"
                out.append(ApprovalDecision(job.event, HOOK_FAILED, job.rule, reason, None, now))
                continue
            # Re-decide on the event as it is now: it may have started, moved or gone while the hook ran.
            current = listed.get(event_id)
            decision = self._policy.decide(current, vm_name, now) if current is not None else None
            if current is None or decision is None or not decision.candidate:
                code, detail = (decision.reason, decision.detail) if decision else (NOT_LISTED, "the event is gone")
                record.status, record.reason = SKIPPED, code
                record.revision = event_revision(current) if current is not None else record.revision
                reason = f"{code}: {detail} (after the hook {result.summary})"
                out.append(ApprovalDecision(current or job.event, SKIPPED, job.rule, reason, None, now))
                continue
            record.status, record.rule, record.revision = POSTING, decision.rule, event_revision(current)
            batch.append(_Item(current, decision.rule, f"{decision.detail}; hook {result.summary}"))

    def _finish_posts(self, now: float, out: list[ApprovalDecision]) -> None:
        for outcome in self._poster.done():  # a batch never sent (shut down) stays POSTING: saved as post_due
            latency, error = outcome.latency_seconds, outcome.error
            together = f" (one request for {len(outcome.items)} events)" if len(outcome.items) > 1 else ""
            for item in outcome.items:
                record = self._records[item.event.event_id]
                record.decided_at = now
                if error is None:
                    record.status = APPROVED
                    reason = f"{item.why}; POST StartRequests succeeded{together}"
                    out.append(ApprovalDecision(item.event, APPROVED, item.rule, reason, latency, now))
                    continue
                record.status = FAILED
                record.attempts += 1
                retry = bool(getattr(error, "retryable", False)) and record.attempts <= len(self._retry_delays)
                if retry:
                    delay = self._retry_delays[record.attempts - 1]
                    record.retry_at = now + delay
                    then = f"POST retry {record.attempts}/{len(self._retry_delays)} in {delay:g} s if still approvable"
                else:
                    record.retry_at = None
                    then = "not retried until the event changes"
                reason = f"POST StartRequests failed{together}: {type(error).__name__}: {error}; {then}"
                out.append(ApprovalDecision(item.event, FAILED, item.rule, reason, latency, now))

    def _prune(self, listed: Mapping[str, ScheduledEvent], now: float) -> None:
        for event_id, record in list(self._records.items()):
            if event_id in listed or record.status in (HOOK_RUNNING, POSTING):
                continue
            if record.status == SKIPPED or now - record.last_seen > self._retention:
                del self._records[event_id]

    def _emit(self, decision: ApprovalDecision) -> None:
        try:
            self._emit_decision(decision)
        except Exception:  # an audit sink bug must not corrupt the bookkeeping or stop the poll loop
            log.exception("approval: emitting the %s decision for %s failed", decision.result, decision.event.event_id)


def _hook_result(future: Future[HookResult]) -> HookResult:
    if future.cancelled():
        return HookResult(exit_code=None, timed_out=False, duration_seconds=0.0, summary="was cancelled")
    error = future.exception()
    if error is not None:
        return HookResult(exit_code=None, timed_out=False, duration_seconds=0.0, summary=f"runner error: {error!r}")
    return future.result()
