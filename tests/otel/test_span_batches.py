"""otel/span_batches.py: ended spans handed on every delay or as soon as a batch is full, bounded, the rest
handed on at shutdown; an exporter's bug does not end the thread."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

import pytest

from se_exporter.otel.span_batches import SpanBatches
from tests.support.wait import wait_for


class Received:
    def __init__(self, fail_first: bool = False) -> None:
        self.batches: list[list[int]] = []
        self.lock = threading.Lock()
        self.release = threading.Event()
        self.release.set()
        self.fail_first = fail_first

    def __call__(self, batch: Sequence[int]) -> None:
        self.release.wait(10)
        with self.lock:
            self.batches.append(list(batch))
        if self.fail_first and len(self.batches) == 1:
            raise RuntimeError("an exporter's bug")

    def spans(self) -> list[int]:
        with self.lock:
            return [span for batch in self.batches for span in batch]


def test_spans_go_on_after_the_delay_in_one_batch() -> None:
    received = Received()
    batches = SpanBatches(received, delay=0.2, batch=100, limit=100)
    for span in range(5):
        batches(span)
    wait_for(lambda: received.spans() == [0, 1, 2, 3, 4], 5, "the batch handed on")
    assert received.batches == [[0, 1, 2, 3, 4]]
    batches.shutdown()


def test_a_full_batch_goes_on_at_once() -> None:
    received = Received()
    batches = SpanBatches(received, delay=3600, batch=3, limit=100)
    for span in range(3):
        batches(span)
    wait_for(lambda: received.spans() == [0, 1, 2], 5, "a full batch handed on before the delay")
    batches.shutdown()


def test_beyond_the_limit_new_spans_are_dropped_with_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    received = Received()
    received.release.clear()  # the exporter is busy
    batches = SpanBatches(received, delay=3600, batch=2, limit=2)
    with caplog.at_level(logging.WARNING):
        batches(0)
        batches(1)  # a full batch: the thread takes both and blocks in the exporter
        wait_for(lambda: not batches._waiting, 5, "the thread took the batch")
        for span in range(2, 6):
            batches(span)
    assert batches.dropped == 2
    assert caplog.text.count("more than 2 ended spans wait") == 1
    received.release.set()
    batches.shutdown()
    assert received.spans() == [0, 1, 2, 3]


def test_shutdown_hands_on_what_waits_then_finishes() -> None:
    received = Received()
    finished = threading.Event()
    batches = SpanBatches(received, delay=3600, batch=100, limit=100, finish=finished.set)
    batches(1)
    batches(2)
    batches.shutdown()
    assert received.batches == [[1, 2]] and finished.is_set()
    batches(3)  # after shutdown: dropped
    assert received.spans() == [1, 2]


def test_an_exporters_bug_does_not_stop_the_thread(caplog: pytest.LogCaptureFixture) -> None:
    received = Received(fail_first=True)
    batches = SpanBatches(received, delay=0.1, batch=100, limit=100)
    with caplog.at_level(logging.ERROR):
        batches(1)
        wait_for(lambda: received.spans() == [1], 5, "the first batch")
        batches(2)
        wait_for(lambda: received.spans() == [1, 2], 5, "the next batch, after the bug")
    assert "span export failed" in caplog.text
    batches.shutdown()
