"""The lifecycle-span state stays bounded, whatever IMDS does with one event's NotBefore."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import msgspec
import pytest
from opentelemetry import trace

from se_exporter.imds.document import Document, ScheduledEvent, VMIdentity
from se_exporter.lifecycle import EventStore
from se_exporter.otel.lifecycle_spans import MAX_STEPS, LifecycleSpans
from se_exporter.poller import PollResult

pytestmark = pytest.mark.pure

T0 = 1_750_000_000.0
NB = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


def test_an_event_rescheduled_at_every_poll_keeps_a_bounded_number_of_steps() -> None:
    store, spans = EventStore(), LifecycleSpans(trace.NoOpTracer())
    for minute in range(500):
        now, moved = T0 + minute, NB + timedelta(minutes=minute)
        document = Document(minute + 1, (ScheduledEvent("E1", "Reboot", "Scheduled", not_before=moved),))
        spans.on_poll(PollResult(document, store.reconcile(document, now), (), True, VMIdentity(), now))
    (lifecycle,) = spans.rows()["open_spans"].values()
    assert len(lifecycle.steps) == MAX_STEPS
    assert lifecycle.steps[0].kind == "scheduled" and lifecycle.steps[-1].at == T0 + 499
    assert len(msgspec.json.encode(spans.rows())) < 64 * 1024
