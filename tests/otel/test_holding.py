"""Spans held while the collector is away: bounded in number and in bytes, sent in requests of bounded
size, the next request encoded only when the last was taken. The collector is a scripted ``send`` (the
I/O seam Holding is given); the clock is injected."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from se_exporter.common.outcome import ACCEPTED, Outcome
from se_exporter.otel.holding import Holding
from se_exporter.otel.pipeline import REQUEST_BYTES, span_bytes

DOWN = Outcome.refused("connection refused", retryable=True)
BAD = Outcome.refused("HTTP 400", retryable=False)


class Collector:
    """Answers each request with the next scripted outcome (the last one repeats), and records it."""

    def __init__(self, *outcomes: Outcome) -> None:
        self.outcomes = list(outcomes)
        self.requests: list[list[str]] = []

    def __call__(self, batch: Sequence[str]) -> Outcome:
        self.requests.append(list(batch))
        return self.outcomes.pop(0) if len(self.outcomes) > 1 else self.outcomes[0]


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


def holding(collector: Collector, clock: Clock, **bounds: int) -> Holding[str]:
    return Holding(
        collector,
        bounds.get("limit", 100),
        monotonic=clock,
        size=len,
        limit_bytes=bounds.get("limit_bytes", 1 << 30),
        request_bytes=bounds.get("request_bytes", 1 << 30),
    )


@pytest.mark.parametrize(
    ("bounds", "offered", "kept"),
    [
        ({"limit": 3}, ["a", "b", "c", "d"], ["b", "c", "d"]),  # by number, oldest first
        ({"limit_bytes": 10}, ["aaaa", "bbbb", "cccc"], ["bbbb", "cccc"]),  # by bytes, oldest first
        ({"limit_bytes": 10}, ["a" * 11], []),  # one item over the whole bound is not held
    ],
)
def test_what_is_held_while_the_collector_is_down_is_bounded(
    bounds: dict[str, int], offered: list[str], kept: list[str]
) -> None:
    collector, clock = Collector(DOWN), Clock()
    held = holding(collector, clock, **bounds)
    held.offer(offered)
    assert held.dropped == len(offered) - len(kept)
    clock.now = 1000.0
    collector.outcomes = [ACCEPTED]
    held.offer([])
    assert [item for request in collector.requests[1:] for item in request] == kept


def test_requests_are_bounded_in_bytes_and_the_next_is_made_only_when_the_last_was_taken() -> None:
    collector, clock = Collector(DOWN), Clock()
    held = holding(collector, clock, request_bytes=8)
    held.offer(["aaaa", "bbbb", "cccc", "d" * 20, "e"])
    assert collector.requests == [["aaaa", "bbbb"]]  # down: nothing more was encoded
    held.offer(["f"])  # within the pause: no attempt
    assert len(collector.requests) == 1
    clock.now = 1000.0
    collector.outcomes = [ACCEPTED]
    held.offer([])
    assert collector.requests[1:] == [["aaaa", "bbbb"], ["cccc"], ["d" * 20], ["e", "f"]]  # one over: alone
    held.offer([])
    assert len(collector.requests) == 5 and held.dropped == 0  # all 6 were held, and nothing is left


def test_a_request_refused_for_good_is_dropped_and_the_rest_still_sent() -> None:
    collector = Collector(BAD, ACCEPTED)
    held = holding(collector, Clock(), request_bytes=4)
    held.offer(["aaaa", "bbbb"])
    assert collector.requests == [["aaaa"], ["bbbb"]]
    held.offer([])
    assert len(collector.requests) == 2 and held.dropped == 1  # nothing left to send


def test_span_size_counts_names_attributes_and_events() -> None:
    spans: list[ReadableSpan] = []

    class Keep(SpanExporter):
        def export(self, batch: Sequence[ReadableSpan]) -> SpanExportResult:
            spans.extend(batch)
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(Keep()))
    tracer = provider.get_tracer("test")
    small = tracer.start_span("s", attributes={"k": "v"})
    small.end()
    large = tracer.start_span("s", attributes={"k": "v", "resources": ["vm-" + "x" * 100] * 20})
    large.add_event("rescheduled", {"log.record.uid": "u" * 36})
    large.end()
    assert span_bytes(spans[0]) < 100
    assert 20 * 104 < span_bytes(spans[1]) - span_bytes(spans[0]) < 20 * 104 + 200
    assert REQUEST_BYTES // span_bytes(spans[1]) >= 100  # a request still carries many of the largest spans
