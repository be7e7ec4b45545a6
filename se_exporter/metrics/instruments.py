"""Counters and histograms with labels, safe from any thread, rendered as families at scrape time.

What ``prometheus_client.Counter`` and ``Histogram`` did here, without ``_created`` series (a timestamp
per label set that every VM of a fleet would pay for and no dashboard or rule reads): a child per label
set, in the order the label sets were first used, each label set rendered once.
"""

from __future__ import annotations

import bisect
import math
import threading
from collections.abc import Sequence

from se_exporter.metrics.families import MetricFamily, go_float, render_labels


class _Count:
    __slots__ = ("_lock", "value")

    def __init__(self, lock: threading.Lock) -> None:
        self._lock = lock
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        if amount < 0:
            raise ValueError("a counter only goes up")
        with self._lock:
            self.value += amount


class LabeledCounter:
    def __init__(self, name: str, documentation: str, label_names: Sequence[str]) -> None:
        self.name = name.removesuffix("_total")
        self.documentation = documentation
        self.label_names = tuple(label_names)
        self._lock = threading.Lock()
        self._children: dict[tuple[str, ...], tuple[str, _Count]] = {}  # values -> rendered labels, count

    def labels(self, *values: str) -> _Count:
        child = self._children.get(values)
        if child is None:
            with self._lock:
                child = self._children.setdefault(values, (render_labels(self.label_names, values), _Count(self._lock)))
        return child[1]

    def family(self) -> MetricFamily:
        family = MetricFamily(self.name, self.documentation, "counter", self.label_names, self.name + "_total")
        with self._lock:
            family.samples = [(family.sample_name, labels, count.value) for labels, count in self._children.values()]
        return family


class _Observations:
    __slots__ = ("_bounds", "_lock", "buckets", "total")

    def __init__(self, lock: threading.Lock, bounds: Sequence[float]) -> None:
        self._lock = lock
        self._bounds = bounds
        self.buckets = [0] * len(bounds)  # per bucket, not cumulative; the last one is +Inf
        self.total = 0.0

    def observe(self, amount: float) -> None:
        index = bisect.bisect_left(self._bounds, amount)  # the first bucket whose bound is >= amount
        with self._lock:
            self.buckets[index] += 1
            self.total += amount


class LabeledHistogram:
    def __init__(self, name: str, documentation: str, label_names: Sequence[str], buckets: Sequence[float]) -> None:
        self.name = name
        self.documentation = documentation
        self.label_names = tuple(label_names)
        self._bounds = (*sorted(float(bound) for bound in buckets), math.inf)
        self._lock = threading.Lock()
        # values -> labels of each bucket's sample (with le), labels of _count and _sum, observations
        self._children: dict[tuple[str, ...], tuple[list[str], str, _Observations]] = {}

    def labels(self, *values: str) -> _Observations:
        child = self._children.get(values)
        if child is None:
            with self._lock:
                child = self._children.get(values) or self._new_child(values)
        return child[2]

    def _new_child(self, values: tuple[str, ...]) -> tuple[list[str], str, _Observations]:
        names = (*self.label_names, "le")
        per_bucket = [render_labels(names, (*values, go_float(bound))) for bound in self._bounds]
        child = self._children[values] = (
            per_bucket,
            render_labels(self.label_names, values),
            _Observations(self._lock, self._bounds),
        )
        return child

    def family(self) -> MetricFamily:
        """Per label set: each bucket (cumulative), then ``_count`` and ``_sum``, as prometheus_client orders them."""
        family = MetricFamily(self.name, self.documentation, "histogram", self.label_names)
        bucket, count, total = self.name + "_bucket", self.name + "_count", self.name + "_sum"
        with self._lock:
            for per_bucket, labels, observed in self._children.values():
                seen = 0
                for bucket_labels, in_bucket in zip(per_bucket, observed.buckets, strict=True):
                    seen += in_bucket
                    family.samples.append((bucket, bucket_labels, seen))
                family.samples += [(count, labels, seen), (total, labels, observed.total)]
        return family
