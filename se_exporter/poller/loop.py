"""The poll loop: IMDS client → document → event store → approver, actions → sinks. It never dies on an IMDS fault.

Every fact a poll produces travels one route: the store's transitions, the approver's decisions and the
actions' outcomes go together, in one ``PollResult``, to every sink (metrics, audit trail, lifecycle spans).
What the loop itself achieved (up, last success, this VM's identity, failures by reason) is its ``status``,
which /metrics and /-/ready read.

**Gaps in the view** (``ViewGaps``; docs/design.md, What was not seen): a stretch without a successful poll
longer than max(3 intervals, GAP_FLOOR_SECONDS): a paused VM, a stopped exporter, a restart (a store
restored from the state file starts with one). The store decides what went missing during it by when the
view went blind. After a gap of 24 h or more, Azure has disabled Scheduled Events, and the request that
enables them again is answered "within 2 minutes" with events following "within 5 minutes": the first
answers may list nothing that is still coming (a Redeploy off degraded hardware is announced days ahead),
so for LISTED_WITHIN_SECONDS after the first good poll a restored event that IMDS does not list is held,
not removed, and the gap stays open until the hold ends.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from types import MappingProxyType
from typing import TYPE_CHECKING, NamedTuple, Protocol

from se_exporter.actions.runs import ActionOutcome
from se_exporter.approval.ledger import ApprovalDecision
from se_exporter.common.times import time_left
from se_exporter.common.tracing import mark_error
from se_exporter.durable.persistence import Persistence
from se_exporter.errors import IMDSError, IMDSStopped, forget_traceback
from se_exporter.imds.client import Backoff, IMDSClient
from se_exporter.imds.document import Document, VMIdentity
from se_exporter.lifecycle import EventStore
from se_exporter.lifecycle.transitions import EventState, Transition

if TYPE_CHECKING:
    from opentelemetry import trace


_NAMELESS = VMIdentity()

POLL_ERROR_REASONS = ("timeout", "connection", "http_4xx", "http_5xx", "throttled", "invalid_document")

UNREACHABLE = (
    "IMDS cannot be reached: is this an Azure VM? On AKS, the IMDS restriction (an agent pool with "
    "podLinkLocalAccess: None) blocks pods without host networking (the Helm chart's hostNetwork: true); "
    "IMDS must not be reached through a proxy, nor blocked by a firewall or a NetworkPolicy"
)


@dataclass(frozen=True, slots=True)
class PollStatus:
    """What the poll loop last achieved; replaced as a whole, so readers need no lock."""

    up: bool = False  # the last poll succeeded
    last_success: float | None = None  # Unix time of the last good poll
    identity: VMIdentity = _NAMELESS
    errors: Mapping[str, int] = field(default_factory=lambda: MappingProxyType(dict.fromkeys(POLL_ERROR_REASONS, 0)))
    api_version: str = ""  # the Scheduled Events api-version of the last good poll ("" before the first)

    @property
    def ready(self) -> bool:
        return self.last_success is not None

    @property
    def unreachable(self) -> bool:
        """IMDS never answered at all: no poll succeeded, and every one failed to connect or timed out."""
        answered = any(self.errors[reason] for reason in ("http_4xx", "http_5xx", "throttled", "invalid_document"))
        tried = self.errors["connection"] or self.errors["timeout"]
        return self.last_success is None and not answered and bool(tried)

    @property
    def readiness(self) -> bool | str:
        """True once IMDS answered; else why not, with what to check when IMDS was never reached at all."""
        if self.last_success is not None:
            return True
        if self.unreachable:
            return f"Not ready: {UNREACHABLE}"
        return "Not ready: no successful IMDS poll yet"


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

    def close(self, timeout: float) -> Sequence[ApprovalDecision]: ...


class Reactor(Protocol):
    """The actions, seen from the loop: runs queued per poll, started once the state is saved, never blocking."""

    def on_poll(self, transitions: Sequence[Transition], identity: VMIdentity) -> Sequence[ActionOutcome]: ...

    def release(self) -> None: ...

    def waiting(self) -> bool: ...

    def startable(self) -> bool: ...

    def close(self, timeout: float) -> Sequence[ActionOutcome]: ...


# The view had a gap when no poll succeeded for longer than max(3 intervals, this): an IMDS hiccup of a few
# polls is not one, a paused VM, a stopped exporter or a restart is (docs/design.md, What was not seen).
GAP_FLOOR_SECONDS = 10.0

DISABLED_AFTER_SECONDS = 24 * 3600.0

LISTED_WITHIN_SECONDS = 300.0


class Look(NamedTuple):
    blind_since: float | None  # the wall time of the last good poll before a gap that ends now, or None
    holding: bool  # events IMDS does not list are kept: Scheduled Events were disabled and list them soon


class ViewGaps:
    def __init__(self, interval: float, blind_since: float | None) -> None:
        self._gap_after = max(3 * interval, GAP_FLOOR_SECONDS)
        self._blind_since = blind_since  # a restored store: blind since its last look (unknown: since ever)
        self._last_good: tuple[float, float] | None = None  # wall and monotonic time of the last good poll
        self._held_for: float | None = None  # the blind_since of the last hold
        self._hold_until = 0.0

    def look(self, now: float, mono: float) -> Look:
        """A good poll at ``now``: the gap it ends, and whether a hold is on."""
        blind = self._gap(now, mono)
        holding = self._holding(now, blind)
        self._last_good = (now, mono)
        self._blind_since = blind if holding else None
        return Look(blind, holding)

    def _gap(self, now: float, mono: float) -> float | None:
        """The larger of the two clocks' intervals counts: a paused VM's monotonic clock may not have moved."""
        blind = self._blind_since
        if self._last_good is not None:
            wall, last_mono = self._last_good
            if (unseen := max(now - wall, mono - last_mono)) > self._gap_after:
                log.info("no poll succeeded for %.0f s (a paused VM, a stopped exporter, IMDS down)", unseen)
                blind = wall if blind is None else min(blind, wall)
        return blind

    def _holding(self, now: float, blind: float | None) -> bool:
        if blind is None or now - blind < DISABLED_AFTER_SECONDS:
            return False
        if self._held_for != blind:  # a new gap of a day or more
            self._held_for, self._hold_until = blind, now + LISTED_WITHIN_SECONDS
            until = datetime.fromtimestamp(self._hold_until, UTC).isoformat(timespec="seconds")
            log.info(
                "no look at IMDS for %.1f h: Azure disables Scheduled Events after 24 h without requests and lists "
                "events within 5 minutes of the request that enables them again; until %s an event IMDS does "
                "not list is held, not removed",
                (now - blind) / 3600,
                until,
            )
        return now < self._hold_until


log = logging.getLogger(__name__)

IDENTITY_RETRY_FIRST_SECONDS = 1.0  # then doubling: this VM's name is known within seconds of IMDS answering

IDENTITY_RETRY_MAX_SECONDS = 30.0

ACTIONS_LOOK_SECONDS = 0.05  # how often the loop looks for a free worker while action runs wait


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
        after_poll: Callable[[], None] | None = None,  # told after every poll, good or not (the textfile)
    ) -> None:
        self.client = client
        self.store = store
        self.status = PollStatus(identity=identity or VMIdentity())
        self._learn_identity = identity is None
        self._next_identity_attempt = float("-inf")
        self._identity_retry = IDENTITY_RETRY_FIRST_SECONDS
        self._sinks = sinks
        self._approver = approver
        self._actions = actions
        self._persistence = persistence
        self._interval = interval
        self._clock = clock
        self._monotonic = monotonic
        self._tracer = tracer  # None: no spans (OpenTelemetry is not even imported)
        self._backoff = Backoff(base=max(interval, 1.0), cap=max(interval, 15.0))
        self._failing_reason: str | None = None
        self._after_poll = after_poll
        self._told = False  # the log said once what to check when IMDS cannot be reached
        self._last_document = Document(incarnation=0)
        self._first_document = True
        # A store restored from the state file: the view had a gap since its last look (unknown: since ever).
        self._gaps = ViewGaps(interval, (store.last_look or 0.0) if store.events else None)

    @property
    def identity(self) -> VMIdentity:
        return self.status.identity

    def run(self, stop: threading.Event) -> None:
        """Poll until ``stop`` is set; the pause after a failure grows with jittered backoff."""
        while not stop.is_set():
            began = self._monotonic()
            self.refresh_identity()
            error = self.poll_once()
            if self._after_poll is not None:
                self._after_poll()
            if error is None:
                pause = self._interval - (self._monotonic() - began)
            elif error.retryable:
                pause = max(self._interval, self._backoff.next_delay())
            else:  # the same request will fail the same way: poll at the slowest pace
                pause = self._backoff.cap
            self._rest(stop, pause)

    def _rest(self, stop: threading.Event, pause: float) -> None:
        """Wait ``pause`` seconds or until ``stop``; meanwhile, while action runs wait, start them as soon as
        workers free (every ``ACTIONS_LOOK_SECONDS``), whatever IMDS answered. Idle, it sleeps in one piece."""
        deadline = self._monotonic() + max(0.0, pause)
        while True:
            left = deadline - self._monotonic()
            waiting = self._actions is not None and self._actions.waiting()
            if stop.wait(max(0.0, min(left, ACTIONS_LOOK_SECONDS) if waiting else left)) or left <= 0:
                return
            if self._actions is not None and self._actions.startable():
                self._start_actions()

    def _start_actions(self) -> None:
        """Report the runs that ended, save, and start the next ones (the at-most-once save comes first)."""
        if self._actions is None:
            return
        if outcomes := self._actions.on_poll((), self.identity):
            self._publish(self._between_documents(actions=outcomes))
            self._persistence.flush()
        self._actions.release()

    def close(self, deadline: float) -> None:
        """Stop the approver and the actions, hand their last outcomes to the sinks and save the state, each
        within the time left to ``deadline`` (``time.monotonic``)."""
        approver, actions = self._approver, self._actions
        decisions = approver.close(time_left(deadline)) if approver is not None else ()  # a POST ended at shutdown
        outcomes = actions.close(time_left(deadline)) if actions is not None else ()  # commands stopped with us
        if decisions or outcomes:
            self._publish(self._between_documents(settled=decisions, actions=outcomes))
        self._persistence.save(time_left(deadline))

    def refresh_identity(self) -> None:
        """Learn this VM's name from compute metadata; retried now and then until it works."""
        if not self._learn_identity or self._monotonic() < self._next_identity_attempt:
            return
        try:
            identity = self.client.get_identity()
        except IMDSStopped:
            return
        except IMDSError as error:
            delay, first = self._identity_retry, self._identity_retry == IDENTITY_RETRY_FIRST_SECONDS
            self._next_identity_attempt = self._monotonic() + delay
            self._identity_retry = min(delay * 2, IDENTITY_RETRY_MAX_SECONDS)
            log.log(
                logging.WARNING if first else logging.INFO,
                "compute metadata unavailable, retrying in %g s (until then this VM's name is unknown: approvals "
                "skip, affects_this_vm is unknown, /-/traffic answers 200): %s",
                delay,
                error,
            )
            return
        self._learn_identity = False
        self.status = replace(self.status, identity=identity)
        log.info("learned VM identity name=%s vm_id=%s location=%s", identity.name, identity.vm_id, identity.location)

    def poll_once(self) -> IMDSError | None:
        """One poll; returns the IMDS error it survived, or None on success."""
        if self._tracer is None:
            return self._poll(None)
        with self._tracer.start_as_current_span("scheduled_events.poll") as span:
            return self._poll(span)

    def _poll(self, span: trace.Span | None) -> IMDSError | None:
        try:
            document = self.client.get_document()
        except IMDSStopped:  # nothing was read and nothing went wrong: the loop ends at its pause
            log.info("stopped while waiting on IMDS")
            return None
        except IMDSError as error:
            self._on_failure(error)
            if span is not None:
                mark_error(span, error.reason, str(error))
            forget_traceback(error)  # the loop holds it through its pause and the next poll, not its frames
            return error
        changed = not self.store.is_unchanged(document)
        if span is not None:
            span.set_attributes(
                {
                    "scheduled_event.document_incarnation": document.incarnation,
                    "scheduled_event.count": len(document.events),
                    "scheduled_event.changed": changed,
                }
            )
        self._on_document(document, changed)
        return None

    def _on_document(self, document: Document, changed: bool) -> None:
        now, mono = self._clock(), self._monotonic()
        look = self._gaps.look(now, mono)
        store = self.store
        transitions = (
            store.reconcile(document, now, mono=mono, blind_since=look.blind_since, keep_missing=look.holding)
            if changed
            else []
        )
        identity = self.identity
        settled: Sequence[ApprovalDecision] = ()
        decisions: Sequence[ApprovalDecision] = ()
        if self._approver is not None:  # the store's states, in document order: events with their impact and cause
            states = list(store.events.values())
            if look.holding:  # a held event is not listed: nothing to approve
                listed = {event.event_id for event in document.events}
                states = [state for state in states if state.event.event_id in listed]
            settled, decisions = self._approver.on_poll(states, identity.name)
        outcomes = self._actions.on_poll(transitions, identity) if self._actions is not None else ()
        self._last_document = document
        # Else no sink has anything to do; the first document is published all the same, so that the sinks see
        # what is listed after a restart (the lifecycle spans end those whose event ended while they were off).
        if changed or transitions or decisions or settled or outcomes or self._first_document:
            self._publish(PollResult(document, transitions, decisions, changed, identity, now, settled, outcomes))
        self._first_document = False
        self._persistence.flush()  # after the sinks: a crash in between re-emits, never loses
        if self._actions is not None:
            self._actions.release()  # runs start once the state says they may have: at most once
        status = self.status  # built whole, not by dataclasses.replace: this runs on every poll
        self.status = PollStatus(
            up=True,
            last_success=now,
            identity=status.identity,
            errors=status.errors,
            api_version=self.client.api_version,
        )
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
        self._start_actions()  # IMDS down: actions still report, and still start
        errors = dict(self.status.errors)
        errors[error.reason] = errors.get(error.reason, 0) + 1
        self.status = replace(self.status, up=False, errors=MappingProxyType(errors))
        if error.reason != self._failing_reason:  # one line per streak, not one per second
            level = logging.WARNING if error.retryable else logging.ERROR
            log.log(level, "IMDS poll failed (reason=%s): %s", error.reason, error)
            self._failing_reason = error.reason
        if self.status.unreachable and not self._told:
            log.error("%s (%s)", UNREACHABLE, error)  # once: what to check, when IMDS never answered
            self._told = True
        else:
            log.debug("IMDS poll failed again (reason=%s): %s", error.reason, error)
