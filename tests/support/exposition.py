"""Read a Prometheus exposition into {(name, labels): value} for assertions."""

from __future__ import annotations

import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from se_exporter.lifecycle import EventStore
from se_exporter.metrics.collector import HasApprovals, ReloadsConfig, SnapshotCollector, SpoolGauge
from se_exporter.metrics.counters import Counters
from se_exporter.poller import PollStatus

Key = tuple[str, frozenset[tuple[str, str]]]


def samples(text: str) -> dict[Key, float]:
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(text: str, name: str, **labels: str) -> float | None:
    """The value of the one sample with this name and exactly these labels, or None."""
    return samples(text).get((name, frozenset(labels.items())))


def series(text: str, name: str) -> list[dict[str, str]]:
    return [dict(labels) for (sample_name, labels) in samples(text) if sample_name == name]


class PollerStub:
    """What the collector reads of the poll loop: its status."""

    def __init__(self, status: PollStatus) -> None:
        self.status = status


def render(
    store: EventStore,
    counters: Counters | None = None,
    status: PollStatus | None = None,
    *,
    clock: Callable[[], float] = time.time,
    version: str = "test",
    spool: SpoolGauge | None = None,
    approvals: HasApprovals | None = None,
    web_config: ReloadsConfig | None = None,
) -> str:
    """/metrics as the exporter renders it from these parts (text format; without the process collectors)."""
    registry = CollectorRegistry(auto_describe=False)
    collector = SnapshotCollector(
        store=store,
        poller=PollerStub(status or PollStatus()),
        counters=counters or Counters(),
        clock=clock,
        version=version,
        spool=spool,
        approvals=approvals,
        web_config=web_config,
    )
    registry.register(collector)
    return generate_latest(registry).decode("utf-8")
