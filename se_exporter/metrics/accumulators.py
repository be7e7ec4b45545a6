"""Thread-safe counters and histograms rendered by our collector at scrape time.

prometheus_client's Counter and Histogram would also expose a ``_created`` series per label
set; on every VM of a fleet that is cost without use, and turning it off is process-global.
These minimal accumulators keep values only and render as metric families on demand.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterable, Sequence

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily

Labels = tuple[str, ...]


class LabeledCounter:
    def __init__(self, name: str, documentation: str, label_names: Sequence[str]) -> None:
        self.name = name
        self.documentation = documentation
        self.label_names = list(label_names)
        self._values: dict[Labels, float] = {}
        self._lock = threading.Lock()

    def initialize(self, label_sets: Iterable[Labels]) -> None:
        """Expose zero series up front, so ``increase()`` sees the first event."""
        with self._lock:
            for labels in label_sets:
                self._values.setdefault(labels, 0.0)

    def inc(self, labels: Labels, amount: float = 1.0) -> None:
        with self._lock:
            self._values[labels] = self._values.get(labels, 0.0) + amount

    def value(self, labels: Labels) -> float:
        with self._lock:
            return self._values.get(labels, 0.0)

    def family(self) -> CounterMetricFamily:
        family = CounterMetricFamily(self.name, self.documentation, labels=self.label_names)
        with self._lock:
            for labels, value in sorted(self._values.items()):
                family.add_metric(list(labels), value)
        return family


class LabeledHistogram:
    def __init__(self, name: str, documentation: str, label_names: Sequence[str], buckets: Sequence[float]) -> None:
        self.name = name
        self.documentation = documentation
        self.label_names = list(label_names)
        self.bounds = sorted(buckets)
        self._le_labels = [*map(_le, self.bounds), "+Inf"]
        self._series: dict[Labels, tuple[list[int], float]] = {}
        self._lock = threading.Lock()

    def observe(self, labels: Labels, value: float) -> None:
        index = bisect.bisect_left(self.bounds, value)  # le is inclusive: value == bound lands in it
        with self._lock:
            if (series := self._series.get(labels)) is None:
                series = ([0] * (len(self.bounds) + 1), 0.0)
            counts, total = series
            counts[index] += 1
            self._series[labels] = (counts, total + value)

    def family(self) -> HistogramMetricFamily:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.label_names)
        with self._lock:
            for labels, (counts, total) in sorted(self._series.items()):
                cumulative, buckets = 0, []
                for bound, count in zip(self._le_labels, counts, strict=True):
                    cumulative += count
                    buckets.append((bound, float(cumulative)))
                family.add_metric(list(labels), buckets, total)
        return family


def _le(bound: float) -> str:
    return repr(float(bound)) if bound != int(bound) else f"{bound:.1f}"
