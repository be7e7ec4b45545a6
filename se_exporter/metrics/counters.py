"""What happened, counted: transitions, approval and action outcomes, IMDS requests, time in Started, notice;
and how a value becomes a label (the one prefix; bounded, whatever IMDS sends).

``Counters`` is a poll sink (transitions and decisions arrive in each ``PollResult``) and the IMDS
client's response observer. The counters and histograms are prometheus_client's own, registered
nowhere: the snapshot collector renders them, without their ``_created`` series (a timestamp per
label set that every VM of a fleet would pay for and no dashboard or rule reads): prometheus_client's
``disable_created_metrics()``, its process-wide switch, is turned when the first ``Counters`` is made.
"""

from __future__ import annotations

import collections
import hashlib
from collections.abc import Iterator, Mapping, Sequence
from itertools import product

from prometheus_client import Counter, Histogram, disable_created_metrics
from prometheus_client.core import Metric

from se_exporter.actions.runs import ACTION_RESULTS
from se_exporter.approval.ledger import COUNTED_RESULTS
from se_exporter.imds.document import APPROVABLE_EVENT_TYPES, EVENT_TYPES
from se_exporter.lifecycle.transitions import TransitionKind
from se_exporter.poller import PollResult

PREFIX = "azure_scheduled_events_"
MAX_LABEL_LENGTH = 128  # an absurd EventId or Resource must not blow up every scrape and the TSDB


def label(value: str) -> str:
    """A value over MAX_LABEL_LENGTH is cut, and keeps a digest of the whole (``<127 chars>…~<8 hex>``), so
    two long EventIds sharing a prefix stay two series (identical label sets make the exposition invalid)."""
    if len(value) <= MAX_LABEL_LENGTH:
        return value
    digest = hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{value[: MAX_LABEL_LENGTH - 1]}…~{digest}"


def affects_label(affects: bool | None) -> str:
    """``affects_this_vm``: "true", "false", or "unknown" while this VM's name is unknown."""
    return "unknown" if affects is None else "true" if affects else "false"


OTHER = "other"


class BoundedValues:
    """Label values of series that live as long as the process (counters, histograms): the known ones,
    plus at most ``limit`` others in the order first seen; any further value is folded into ``other``.

    An IMDS listing thousands of invented EventTypes once left thousands of permanent series per type
    behind; the events are still counted, under ``other``.
    """

    def __init__(self, known: tuple[str, ...], limit: int) -> None:
        self._kept = dict.fromkeys(known)
        self._limit = len(self._kept) + limit
        self.folded = 0  # values seen beyond the limit

    def __call__(self, value: str) -> str:
        if value in self._kept:
            return value
        if len(self._kept) < self._limit:
            self._kept[value] = None
            return value
        self.folded += 1
        return OTHER


REQUEST_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 120)
STARTED_BUCKETS = (5, 10, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200)
NOTICE_BUCKETS = (30, 60, 300, 600, 900, 1800, 3600, 7200, 21600, 86400, 259200, 604800, 1209600)


# A write with its fsync: a millisecond on a quiet disk, seconds on an Azure disk at its IOPS cap.
WRITE_BUCKETS = (0.001, 0.005, 0.025, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


# EventTypes beyond the five known kept as their own label value; Azure adds one rarely, never dozens.
MAX_UNKNOWN_EVENT_TYPES = 5


class Counters:
    """Safe from any thread (prometheus_client locks each value)."""

    def __init__(
        self,
        approval_enabled: bool = False,
        actions: Mapping[str, Sequence[str]] | None = None,
        written_files: Sequence[str] = (),
    ) -> None:
        """``actions``: each configured action's name and the transitions it runs for (their zero series);
        ``written_files``: the files written durably ("state", "spool"), whose write times are observed."""
        disable_created_metrics()  # before the first metric is made: none then keeps a _created timestamp
        self._event_type = BoundedValues(EVENT_TYPES, MAX_UNKNOWN_EVENT_TYPES)
        self.transitions = Counter(
            PREFIX + "transitions", "Lifecycle transitions observed.", ["event_type", "transition"], registry=None
        )
        # A series per type and transition from its first count, not thirty zero series per VM (300,000 at
        # 10,000 VMs, which the fleet's transitions rule took over a second to read): the rules and the
        # dashboards count a series' birth as its increase (dashboards/mixin/recording.py, increase_with_births).
        self.approvals = Counter(PREFIX + "approvals", "Approval outcomes.", ["event_type", "result"], registry=None)
        if approval_enabled:
            for event_type, result in sorted(product(APPROVABLE_EVENT_TYPES, COUNTED_RESULTS)):
                self.approvals.labels(event_type, result)
        self.actions = Counter(
            PREFIX + "actions", "Runs of the actions on transitions.", ["action", "transition", "result"], registry=None
        )
        for name, transitions in (actions or {}).items():
            for transition, action_result in product(transitions, ACTION_RESULTS):
                self.actions.labels(name, transition, action_result)
        self.imds_requests = Counter(
            PREFIX + "imds_requests",
            "IMDS requests by method and HTTP code (or error).",
            ["method", "code"],
            registry=None,
        )
        self.imds_request_duration = Histogram(
            PREFIX + "imds_request_duration_seconds",
            "IMDS request latency.",
            ["method"],
            buckets=REQUEST_BUCKETS,
            registry=None,
        )
        self.started_duration = Histogram(
            PREFIX + "started_duration_seconds",
            "Total time in Started of events that completed.",
            ["event_type"],
            buckets=STARTED_BUCKETS,
            registry=None,
        )
        self.writes = Histogram(
            PREFIX + "state_write_seconds",
            "Time of each durable write of the state file and the log spool, fsync included.",
            ["file"],
            buckets=WRITE_BUCKETS,
            registry=None,
        )
        for file in written_files:
            self.writes.labels(file)
        self.notice = Histogram(
            PREFIX + "notice_seconds",
            "NotBefore minus first sighting, for events first seen Scheduled.",
            ["event_type"],
            buckets=NOTICE_BUCKETS,
            registry=None,
        )

    def on_poll(self, result: PollResult) -> None:
        for outcome in result.actions:
            self.actions.labels(outcome.action, outcome.transition.kind, outcome.result).inc()
        for decision in result.all_decisions:
            if decision.counted:
                self.approvals.labels(self._event_type(label(decision.event.event_type)), decision.result).inc()
        # One label lookup per label set and poll: a scale set's first document may bring 1,000 at once.
        counted: collections.Counter[tuple[str, str]] = collections.Counter()
        notices: collections.defaultdict[str, list[float]] = collections.defaultdict(list)
        for transition in result.transitions:
            event = transition.event
            event_type = self._event_type(label(event.event_type))  # an unknown type: bounded, then "other"
            counted[event_type, transition.kind] += 1
            if transition.kind is TransitionKind.COMPLETED and transition.started_seconds is not None:
                self.started_duration.labels(event_type).observe(transition.started_seconds)
            if transition.kind is TransitionKind.SCHEDULED and event.not_before is not None:
                notices[event_type].append(max(0.0, event.not_before.timestamp() - transition.first_seen))
        for (event_type, kind), count in counted.items():
            self.transitions.labels(event_type, kind).inc(count)
        for event_type, seconds in notices.items():
            histogram = self.notice.labels(event_type)
            for notice in seconds:
                histogram.observe(notice)

    def observe_write(self, file: str, seconds: float) -> None:
        self.writes.labels(file).observe(seconds)

    def observe_response(self, method: str, code: str, seconds: float) -> None:
        self.imds_requests.labels(method, code).inc()
        self.imds_request_duration.labels(method).observe(seconds)

    def families(self) -> Iterator[Metric]:
        """Every counter and histogram."""
        counted = (self.transitions, self.approvals, self.actions, self.imds_requests)
        observed = (self.imds_request_duration, self.started_duration, self.notice, self.writes)
        for metric in (*counted, *observed):
            yield from metric.collect()
