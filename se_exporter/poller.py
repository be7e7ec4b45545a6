"""The poll loop: IMDS client → document → event store → sinks. It never dies on an IMDS fault."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from opentelemetry import trace

from se_exporter.errors import IMDSError
from se_exporter.health import PollHealth
from se_exporter.imds.client import IMDSClient
from se_exporter.imds.document import Document
from se_exporter.imds.identity import VMIdentity
from se_exporter.imds.pacing import Backoff
from se_exporter.metrics.collector import ExporterMetrics
from se_exporter.state.persistence import Persistence
from se_exporter.store import EventStore, Transition

log = logging.getLogger(__name__)
IDENTITY_RETRY_SECONDS = 60.0


@dataclass(frozen=True, slots=True)
class PollResult:
    document: Document
    transitions: Sequence[Transition]
    changed: bool  # the document differed from the previous one
    identity: VMIdentity
    now: float


class PollSink(Protocol):
    def on_poll(self, result: PollResult) -> None: ...


class Poller:
    def __init__(
        self,
        *,
        client: IMDSClient,
        store: EventStore,
        metrics: ExporterMetrics,
        sinks: Sequence[PollSink],
        persistence: Persistence,
        interval: float,
        identity: VMIdentity | None = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        tracer: trace.Tracer | None = None,
        backoff: Backoff | None = None,
    ) -> None:
        self.client = client
        self.store = store
        self.health = PollHealth()
        self.identity = identity or VMIdentity()
        self._learn_identity = identity is None
        self._next_identity_attempt = float("-inf")
        self._metrics = metrics
        self._sinks = sinks
        self._persistence = persistence
        self._interval = interval
        self._clock = clock
        self._monotonic = monotonic
        self._tracer = tracer or trace.NoOpTracer()
        self._backoff = backoff or Backoff(base=max(interval, 1.0), cap=max(interval, 15.0))
        self._failing_reason: str | None = None

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

    def refresh_identity(self) -> None:
        """Learn this VM's name from compute metadata; retried now and then until it works."""
        if not self._learn_identity or self._monotonic() < self._next_identity_attempt:
            return
        try:
            self.identity = self.client.get_identity()
        except IMDSError as error:
            self._next_identity_attempt = self._monotonic() + IDENTITY_RETRY_SECONDS
            log.warning("compute metadata unavailable, affects_this_vm stays unknown: %s", error)
            return
        self._learn_identity = False
        log.info("learned VM identity name=%s vm_id=%s location=%s", self.identity.name,
                 self.identity.vm_id, self.identity.location)

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
        for transition in transitions:
            self._metrics.observe_transition(transition)
        result = PollResult(document, transitions, changed, self.identity, now)
        if changed:
            self._persistence.request_save()
        for sink in self._sinks:  # before persisting: a crash in between re-emits, never loses
            sink.on_poll(result)
        self._persistence.flush()  # once, for the store and whatever the sinks asked to keep
        self.health = PollHealth(up=True, last_success=now)
        self._backoff.reset()
        if self._failing_reason is not None:
            log.info("IMDS polls succeed again after %s errors", self._failing_reason)
            self._failing_reason = None

    def _on_failure(self, error: IMDSError) -> None:
        self._metrics.observe_poll_error(error)
        self.health = PollHealth(up=False, last_success=self.health.last_success)
        if error.reason != self._failing_reason:  # one line per streak, not one per second
            level = logging.WARNING if error.retryable else logging.ERROR
            log.log(level, "IMDS poll failed (reason=%s): %s", error.reason, error)
            self._failing_reason = error.reason
        else:
            log.debug("IMDS poll failed again (reason=%s): %s", error.reason, error)
