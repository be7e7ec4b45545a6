"""Ended spans, gathered and handed on in batches by one thread (as the SDK's batch processor does).

Every ``delay`` seconds (``OTEL_BSP_SCHEDULE_DELAY``), or as soon as ``batch`` spans wait, the thread
hands what waits to ``export`` (``Holding.offer``: it never blocks on an outage, it holds). At most
``limit`` spans wait: beyond, a new span is dropped and counted, as the SDK does, with one warning
per episode. ``shutdown`` hands on what is left and runs ``finish`` (a last send, then the client's
close); the caller bounds how long it may take.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

log = logging.getLogger("se_exporter.otel.pipeline")
T = TypeVar("T")


class SpanBatches(Generic[T]):
    def __init__(
        self,
        export: Callable[[Sequence[T]], None],
        *,
        delay: float,
        batch: int,
        limit: int,
        finish: Callable[[], None] = lambda: None,
    ) -> None:
        self._export = export
        self._delay = delay
        self._batch = batch
        self._limit = limit
        self._finish = finish
        self._lock = threading.Lock()
        self._waiting: list[T] = []
        self._wake = threading.Event()
        self._stopped = False
        self.dropped = 0  # spans that did not fit while the thread was busy (since the last warning)
        self._thread = threading.Thread(target=self._run, name="se-exporter-span-batches", daemon=True)
        self._thread.start()

    def __call__(self, span: T) -> None:
        """A span ended (on any thread)."""
        with self._lock:
            if self._stopped or len(self._waiting) >= self._limit:
                if not self.dropped:
                    log.warning("more than %d ended spans wait to be exported: newer ones are dropped", self._limit)
                self.dropped += 1
                return
            self._waiting.append(span)
            full = len(self._waiting) >= self._batch
        if full:
            self._wake.set()

    def shutdown(self) -> None:
        """Hand on what waits, then ``finish``; later spans are dropped."""
        with self._lock:
            self._stopped = True
        self._wake.set()
        self._thread.join()
        self._hand_on()
        self._finish()

    def _run(self) -> None:
        while not self._stopped:
            self._wake.wait(self._delay)
            self._wake.clear()
            if not self._stopped:
                self._hand_on()

    def _hand_on(self) -> None:
        with self._lock:
            batch, self._waiting = self._waiting, []
            self.dropped = 0
        if batch:
            try:
                self._export(batch)
            except Exception:  # a bug in an exporter must not end the thread: later spans still go
                log.exception("span export failed")
