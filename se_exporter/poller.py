"""The poll loop: IMDS client → document → event store → approver, actions → sinks. It never dies on an IMDS fault.

Every fact a poll produces travels one route: the store's transitions, the approver's decisions and the
actions' outcomes go together, in one ``PollResult``, to every sink (metrics, audit trail, lifecycle spans). What the
loop itself achieved (up, last success, this VM's identity, failures by reason) is its ``status``,
which /metrics and /-/ready read.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Protocol

from opentelemetry import trace

from se_exporter.actions.runs import ActionOutcome
from se_exporter.approval.decision import ApprovalDecision
from se_exporter.errors import IMDSError
from se_exporter.imds.client import IMDSClient
from se_exporter.imds.document import Document
from se_exporter.imds.identity import VMIdentity
from se_exporter.imds.pacing import Backoff
from se_exporter.lifecycle import EventState, Transition
from se_exporter.state.persistence import Persistence
from se_exporter.store import EventStore

log = logging.getLogger(__name__)
IDENTITY_RETRY_SECONDS = 60.0
_NAMELESS = VMIdentity()
POLL_ERROR_REASONS = ("timeout", "connection", "http_4xx", "http_5xx", "throttled", "invalid_document")


@dataclass(frozen=True, slots=True)
class PollStatus:
    """What the poll loop last achieved; replaced as a whole, so readers need no lock."""

    up: bool = False  # the last poll succeeded
    last_success: float | None = None  # Unix time of the last good poll
    identity: VMIdentity = _NAMELESS
    errors: Mapping[str, int] = field(default_factory=lambda: MappingProxyType(dict.fromkeys(POLL_ERROR_REASONS, 0)))

    @property
    def ready(self) -> bool:
        return self.last_success is not None


@dataclass(frozen=True, slots=True)
class PollResult:
    """What one poll found, for every sink: facts in the order they happened."""

    document: Document
    transitions: Sequence[Transition]
    decisions: Sequence[ApprovalDecision]  # made on this document: after its transitions
    changed: bool  # the document differed from the previous one
    identity: VMIdentity
    now: float
    settled: Sequence[ApprovalDecision] = ()  # work that ended before the document was read: before them
    actions: Sequence[ActionOutcome] = ()  # actions that ended (or were refused) since the last poll

    @property
    def all_decisions(self) -> Sequence[ApprovalDecision]:
        return [*self.settled, *self.decisions] if self.settled else self.decisions


class PollSink(Protocol):
    def on_poll(self, result: PollResult) -> None: ...


class Decider(Protocol):
    """The approver, seen from the loop: it decides on every good poll and never blocks it. It returns
    (work settled before the document was read, decisions made on it)."""

    def on_poll(
        self, events: Sequence[EventState], vm_name: str | None
    ) -> tuple[Sequence[ApprovalDecision], Sequence[ApprovalDecision]]: ...

    def close(self) -> Sequence[ApprovalDecision]: ...


class Reactor(Protocol):
    """The actions, seen from the loop: runs queued per poll, started once the state is saved, never blocking."""

    def on_poll(self, transitions: Sequence[Transition], identity: VMIdentity) -> Sequence[ActionOutcome]: ...

    def release(self) -> None: ...

    def close(self) -> Sequence[ActionOutcome]: ...


class Poller:
    def __init__(
        self,
        *,
        client: IMDSClient,
        store: EventStore,
        sinks: Sequence[PollSink],
        persistence: Persistence,
        interval: float,
        identity: VMIdentity | None = None,
        approver: Decider | None = None,
        actions: Reactor | None = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        tracer: trace.Tracer | None = None,
        backoff: Backoff | None = None,
    ) -> None:
        self.client = client
        self.store = store
        self.status = PollStatus(identity=identity or VMIdentity())
        self._learn_identity = identity is None
        self._next_identity_attempt = float("-inf")
        self._sinks = sinks
        self._approver = approver
        self._actions = actions
        self._persistence = persistence
        self._interval = interval
        self._clock = clock
        self._monotonic = monotonic
        self._tracer = tracer or trace.NoOpTracer()
        self._backoff = backoff or Backoff(base=max(interval, 1.0), cap=max(interval, 15.0))
        self._failing_reason: str | None = None
        self._last_document = Document(incarnation=0)

    @property
    def identity(self) -> VMIdentity:
        return self.status.identity

    def run(self, stop: threading.Event) -> None:
        """Poll until ``stop`` is set; the pause after a failure grows with jittered backoff."""
        while not stop.is_set():
            began = self._monotonic()
            self.refresh_identity()
            error = self.poll_once()
            if error is None:
                pause = self._interval - (self._monotonic() - began)
            elif error.retryable:
                pause = max(self._interval, self._backoff.next_delay())
            else:  # the same request will fail the same way: poll at the slowest pace
                pause = self._backoff.cap
            stop.wait(max(0.0, pause))

    def close(self) -> None:
        """Stop the approver and the actions, hand their last outcomes to the sinks and save the state."""
        decisions = self._approver.close() if self._approver is not None else ()  # a POST that ended at shutdown
        outcomes = self._actions.close() if self._actions is not None else ()  # commands stopped with us
        if decisions or outcomes:
            self._publish(self._between_documents(settled=decisions, actions=outcomes))
        self._persistence.save()

    def refresh_identity(self) -> None:
        """Learn this VM's name from compute metadata; retried now and then until it works."""
        if not self._learn_identity or self._monotonic() < self._next_identity_attempt:
            return
        try:
            identity = self.client.get_identity()
        except IMDSError as error:
            self._next_identity_attempt = self._monotonic() + IDENTITY_RETRY_SECONDS
            log.warning("compute metadata unavailable, affects_this_vm stays unknown: %s", error)
            return
        self._learn_identity = False
        self.status = replace(self.status, identity=identity)
        log.info("learned VM identity name=%s vm_id=%s location=%s", identity.name, identity.vm_id, identity.location)

    def poll_once(self) -> IMDSError | None:
        """One poll; returns the IMDS error it survived, or None on success."""
        with self._tracer.start_as_current_span("scheduled_events.poll") as span:
            try:
                document = self.client.get_document()
            except IMDSError as error:
                self._on_failure(error)
                span.set_status(trace.Status(trace.StatusCode.ERROR, str(error)[:200]))
                span.set_attribute("error.type", error.reason)
                return error
            changed = not self.store.is_unchanged(document)
            span.set_attribute("scheduled_event.document_incarnation", document.incarnation)
            span.set_attribute("scheduled_event.count", len(document.events))
            span.set_attribute("scheduled_event.changed", changed)
            self._on_document(document, changed)
        return None

    def _on_document(self, document: Document, changed: bool) -> None:
        now = self._clock()
        transitions = self.store.reconcile(document, now) if changed else []
        identity = self.identity
        settled: Sequence[ApprovalDecision] = ()
        decisions: Sequence[ApprovalDecision] = ()
        if self._approver is not None:  # the store's states, in document order: events with their impact and cause
            settled, decisions = self._approver.on_poll(list(self.store.events.values()), identity.name)
        outcomes = self._actions.on_poll(transitions, identity) if self._actions is not None else ()
        self._last_document = document
        self._publish(PollResult(document, transitions, decisions, changed, identity, now, settled, outcomes))
        self._persistence.flush()  # after the sinks: a crash in between re-emits, never loses
        if self._actions is not None:
            self._actions.release()  # runs start once the state says they may have: at most once
        self.status = replace(self.status, up=True, last_success=now)
        self._backoff.reset()
        if self._failing_reason is not None:
            log.info("IMDS polls succeed again after %s errors", self._failing_reason)
            self._failing_reason = None

    def _publish(self, result: PollResult) -> None:
        for sink in self._sinks:
            try:
                sink.on_poll(result)
            except Exception:  # a bug in one sink must neither stop monitoring nor starve the other sinks
                log.exception("poll sink %s failed", type(sink).__name__)

    def _between_documents(
        self, settled: Sequence[ApprovalDecision] = (), actions: Sequence[ActionOutcome] = ()
    ) -> PollResult:
        """A result with no document of its own: outcomes of work that ended while no document was read."""
        return PollResult(self._last_document, (), (), False, self.identity, self._clock(), settled, actions)

    def _on_failure(self, error: IMDSError) -> None:
        if self._actions is not None and (outcomes := self._actions.on_poll((), self.identity)):
            self._publish(self._between_documents(actions=outcomes))  # IMDS down: actions still report
            self._persistence.flush()
        errors = dict(self.status.errors)
        errors[error.reason] = errors.get(error.reason, 0) + 1
        self.status = replace(self.status, up=False, errors=MappingProxyType(errors))
        if error.reason != self._failing_reason:  # one line per streak, not one per second
            level = logging.WARNING if error.retryable else logging.ERROR
            log.log(level, "IMDS poll failed (reason=%s): %s", error.reason, error)
            self._failing_reason = error.reason
        else:
            log.debug("IMDS poll failed again (reason=%s): %s", error.reason, error)
