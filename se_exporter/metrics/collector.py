"""Prometheus metrics of DESIGN.md, rendered from a snapshot at scrape time.

``ExporterMetrics`` accumulates what happened (transitions, approvals, requests, errors);
``SnapshotCollector`` renders it together with what *is* (the listed events, poll health)
on every scrape, so per-event series vanish with their event and the "seconds until" gauges
are exact at scrape time. Nothing here is registered anywhere unless a registry is passed in.
"""

from __future__ import annotations

import hashlib
import platform
from collections.abc import Callable, Iterator, Mapping

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from se_exporter.errors import IMDSError
from se_exporter.health import PollHealth
from se_exporter.imds.document import EVENT_STATUSES, EVENT_TYPES
from se_exporter.imds.identity import VMIdentity
from se_exporter.metrics.accumulators import LabeledCounter, LabeledHistogram
from se_exporter.store import COMPLETED, SCHEDULED, TRANSITIONS, EventState, Transition

PREFIX = "azure_scheduled_events_"
POLL_ERROR_REASONS = ("timeout", "connection", "http_4xx", "http_5xx", "throttled", "invalid_document")
APPROVAL_RESULTS = ("approved", "dry_run", "failed", "hook_failed")
MAX_LABEL_LENGTH = 128  # an absurd EventId or Resource must not blow up every scrape and the TSDB

REQUEST_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 120)
STARTED_BUCKETS = (5, 10, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200)
NOTICE_BUCKETS = (30, 60, 300, 600, 900, 1800, 3600, 7200, 21600, 86400, 259200, 604800, 1209600)


class ExporterMetrics:
    """Counters and histograms; fed by the poll loop and the sinks, safe from any thread."""

    def __init__(self, approval_enabled: bool = False) -> None:
        self.transitions = LabeledCounter(
            PREFIX + "transitions", "Lifecycle transitions observed.", ["event_type", "transition"]
        )
        self.transitions.initialize((t, k) for t in EVENT_TYPES for k in TRANSITIONS)
        self.approvals = LabeledCounter(PREFIX + "approvals", "Approval outcomes.", ["event_type", "result"])
        if approval_enabled:
            self.approvals.initialize((t, r) for t in EVENT_TYPES for r in APPROVAL_RESULTS)
        self.imds_requests = LabeledCounter(
            PREFIX + "imds_requests", "IMDS requests by method and HTTP code (or error).", ["method", "code"]
        )
        self.imds_request_duration = LabeledHistogram(
            PREFIX + "imds_request_duration_seconds", "IMDS request latency.", ["method"], REQUEST_BUCKETS
        )
        self.poll_errors = LabeledCounter(PREFIX + "poll_errors", "Failed polls by reason.", ["reason"])
        self.poll_errors.initialize((reason,) for reason in POLL_ERROR_REASONS)
        self.started_duration = LabeledHistogram(
            PREFIX + "started_duration_seconds",
            "Total time in Started of events that completed.",
            ["event_type"],
            STARTED_BUCKETS,
        )
        self.notice = LabeledHistogram(
            PREFIX + "notice_seconds",
            "NotBefore minus first sighting, for events first seen Scheduled.",
            ["event_type"],
            NOTICE_BUCKETS,
        )

    def observe_transition(self, transition: Transition) -> None:
        event = transition.event
        event_type = _label(event.event_type)  # an unknown type is kept, but bounded like every label
        self.transitions.inc((event_type, transition.kind))
        if transition.kind == COMPLETED and transition.started_seconds is not None:
            self.started_duration.observe((event_type,), transition.started_seconds)
        if transition.kind == SCHEDULED and event.not_before is not None:
            notice = event.not_before.timestamp() - transition.first_seen
            self.notice.observe((event_type,), max(0.0, notice))

    def observe_response(self, method: str, code: str, seconds: float) -> None:
        self.imds_requests.inc((method, code))
        self.imds_request_duration.observe((method,), seconds)

    def observe_poll_error(self, error: IMDSError) -> None:
        self.poll_errors.inc((error.reason,))

    def observe_approval(self, event_type: str, result: str) -> None:
        self.approvals.inc((_label(event_type), result))

    def families(self) -> list[LabeledCounter | LabeledHistogram]:
        return [
            self.transitions, self.approvals, self.imds_requests, self.imds_request_duration,
            self.poll_errors, self.started_duration, self.notice,
        ]


class SnapshotCollector(Collector):
    """Renders every metric of DESIGN.md from the current state at scrape time."""

    def __init__(
        self,
        *,
        metrics: ExporterMetrics,
        events: Callable[[], Mapping[str, EventState]],
        incarnation: Callable[[], int | None],
        health: Callable[[], PollHealth],
        identity: Callable[[], VMIdentity],
        clock: Callable[[], float],
        version: str,
        extra: Callable[[], list[Metric]] | None = None,
    ) -> None:
        self._metrics = metrics
        self._events = events
        self._incarnation = incarnation
        self._health = health
        self._identity = identity
        self._clock = clock
        self._version = version
        self._extra = extra or list

    def collect(self) -> Iterator[Metric]:
        yield from (family for family in self._families() if family.samples)  # no bare HELP/TYPE lines

    def describe(self) -> Iterator[Metric]:
        """Every family, even empty: the registry learns the names from it, which /metrics?name[]= needs."""
        return self._families()

    def _families(self) -> Iterator[Metric]:
        events = list(self._events().values())
        yield from _event_families(events, self._identity(), self._clock())
        yield from self._health_families()
        yield from (accumulator.family() for accumulator in self._metrics.families())
        yield from self._extra()

    def _health_families(self) -> Iterator[GaugeMetricFamily]:
        health = self._health()
        yield GaugeMetricFamily(PREFIX + "imds_up", "1 if the last IMDS poll succeeded.", value=int(health.up))
        last_success = GaugeMetricFamily(
            PREFIX + "last_successful_poll_timestamp_seconds", "Unix time of the last successful poll."
        )
        if health.last_success is not None:  # absent, not 0 (1970), before the first good poll
            last_success.add_metric([], health.last_success)
        yield last_success
        incarnation = GaugeMetricFamily(PREFIX + "document_incarnation", "Last DocumentIncarnation.")
        if (value := self._incarnation()) is not None:
            incarnation.add_metric([], value)
        yield incarnation
        info = GaugeMetricFamily(
            PREFIX + "exporter_build_info", "Build information.", labels=["version", "python_version"]
        )
        info.add_metric([self._version, platform.python_version()], 1)
        yield info


def _event_families(events: list[EventState], identity: VMIdentity, now: float) -> Iterator[GaugeMetricFamily]:
    pending = GaugeMetricFamily(PREFIX + "pending", "Events now listed.", labels=["event_type", "event_status"])
    counts = {(event_type, status): 0 for event_type in EVENT_TYPES for status in EVENT_STATUSES}
    for state in events:
        key = (_label(state.event.event_type), _label(state.event.event_status))
        counts[key] = counts.get(key, 0) + 1
    for (event_type, status), count in sorted(counts.items()):
        pending.add_metric([event_type, status], count)
    yield pending

    per_event = ["event_id", "event_type"]
    info = GaugeMetricFamily(
        PREFIX + "event_info",
        "One series per listed event.",
        labels=["event_id", "event_type", "event_status", "event_source", "resource_type", "affects_this_vm"],
    )
    not_before = GaugeMetricFamily(
        PREFIX + "event_not_before_timestamp_seconds", "NotBefore as Unix time.", labels=per_event
    )
    until = GaugeMetricFamily(
        PREFIX + "event_seconds_until_not_before", "NotBefore minus now (negative once passed).", labels=per_event
    )
    duration = GaugeMetricFamily(
        PREFIX + "event_duration_seconds", "DurationInSeconds as given (-1 unknown).", labels=per_event
    )
    started = GaugeMetricFamily(
        PREFIX + "event_started_seconds", "Time spent in Started so far.", labels=per_event
    )
    for state in sorted(events, key=lambda s: s.event.event_id):
        event = state.event
        labels = [_label(event.event_id), _label(event.event_type)]
        info.add_metric(
            [*labels, _label(event.event_status), _label(event.event_source), _label(event.resource_type),
             identity.affects(event.resources)],
            1,
        )
        duration.add_metric(labels, event.duration_seconds)
        if event.not_before is not None:
            moment = event.not_before.timestamp()
            not_before.add_metric(labels, moment)
            until.add_metric(labels, moment - now)
        if (seconds := state.started_seconds(now)) is not None:
            started.add_metric(labels, seconds)
    yield from (info, not_before, until, duration, started)


def log_spool_families(depth: int, dropped: int) -> list[Metric]:
    """The OTLP log spool (rendered only while OTLP log export is on)."""
    return [
        GaugeMetricFamily(PREFIX + "log_spool_depth",
                          "Log records (transitions, approvals) waiting for the OTLP collector.", value=depth),
        CounterMetricFamily(PREFIX + "log_spool_dropped",
                            "Log records dropped, oldest first, because the spool was full.", value=dropped),
    ]


def _label(value: str) -> str:
    """A value over MAX_LABEL_LENGTH is cut, and keeps a digest of the whole (``<127 chars>…~<8 hex>``), so
    two long EventIds sharing a prefix stay two series (identical label sets make the exposition invalid)."""
    if len(value) <= MAX_LABEL_LENGTH:
        return value
    digest = hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{value[: MAX_LABEL_LENGTH - 1]}…~{digest}"
