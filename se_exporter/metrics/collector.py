"""Every metric of docs/design.md, rendered from a snapshot at scrape time.

The collector reads what *is* (the store's listed events, the poll loop's status) and what
happened (``Counters``) on every scrape, so per-event series vanish with their event and the
"seconds until" gauges are exact at scrape time. It is a prometheus_client ``Collector``: the exporter
registers it in a registry of its own (``exporter_registry``), whose exposition prometheus_client writes.

The exporter's registry (``exporter_registry``): a private ``CollectorRegistry``, never prometheus_client's global one.

It holds the snapshot collector (every ``azure_scheduled_events_*`` family) and client_python's own
process, platform and GC collectors (``process_*``, ``python_info``, ``python_gc_*``), which every
client_python exporter shows. ``process_*`` comes from ``/proc`` and is absent where there is none
(Windows).
"""

from __future__ import annotations

import platform
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Protocol

from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from se_exporter.imds.document import KNOWN_LISTINGS, VMIdentity
from se_exporter.lifecycle import EventStore
from se_exporter.lifecycle.transitions import EventState
from se_exporter.metrics.counters import PREFIX, Counters, affects_label, label
from se_exporter.poller import PollStatus


def exporter_registry(collector: Collector) -> CollectorRegistry:
    # auto_describe=False: the snapshot collector describes itself (its names, for name[] filters), and
    # the registry must not collect it at registration, before the first poll.
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return registry


class HasStatus(Protocol):
    @property
    def status(self) -> PollStatus: ...


class SpoolGauge(Protocol):
    """The OTLP log spool, as far as /metrics is concerned."""

    @property
    def depth(self) -> int: ...

    @property
    def dropped(self) -> int: ...

    @property
    def write_errors(self) -> int: ...


class HasApprovals(Protocol):
    """The approver, as far as /metrics is concerned."""

    @property
    def approved(self) -> Mapping[str, float]: ...


class CountsErrors(Protocol):
    """The state file or the textfile, as far as /metrics is concerned."""

    @property
    def errors(self) -> int: ...


class ReloadsConfig(Protocol):
    """The web config in force, as far as /metrics is concerned."""

    @property
    def reload_successful(self) -> bool: ...


class SnapshotCollector(Collector):
    def __init__(
        self,
        *,
        store: EventStore,
        poller: HasStatus,
        counters: Counters,
        clock: Callable[[], float],
        version: str,
        spool: SpoolGauge | None = None,
        state: CountsErrors | None = None,
        approvals: HasApprovals | None = None,
        textfile: CountsErrors | None = None,
        web_config: ReloadsConfig | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._poller = poller
        self._counters = counters
        self._clock = clock
        self._monotonic = monotonic
        self._version = version
        self._spool = spool
        self._state = state
        self._approvals = approvals
        self._textfile = textfile
        self._web_config = web_config
        self._cached: _Cached | None = None

    def collect(self) -> Iterator[Metric]:
        yield from (family for family in self._families() if family.samples)  # no bare HELP/TYPE lines

    def describe(self) -> Iterator[Metric]:
        """Every family, even empty: the registry learns the names from it, which /metrics?name[]= needs."""
        return self._families()

    def _families(self) -> Iterator[Metric]:
        status = self._poller.status
        yield from self._event_families(status.identity)
        yield from self._health_families(status)
        yield from self._counters.families()
        errors = CounterMetricFamily(PREFIX + "poll_errors", "Failed polls by reason.", labels=["reason"])
        for reason, count in sorted(status.errors.items()):
            errors.add_metric([reason], count)
        yield errors
        yield self._persistence_errors()
        if self._web_config is not None:
            yield GaugeMetricFamily(
                PREFIX + "web_config_last_reload_successful",
                "1 while the --web.config.file in force parsed; 0 after a change that did not (requests fail).",
                value=int(self._web_config.reload_successful),
            )
        if self._spool is not None:
            yield GaugeMetricFamily(
                PREFIX + "log_spool_depth",
                "Log records (transitions, approvals) waiting for the OTLP collector.",
                value=self._spool.depth,
            )
            yield CounterMetricFamily(
                PREFIX + "log_spool_dropped",
                "Log records dropped: the oldest when the spool was full, or one the collector never takes.",
                value=self._spool.dropped,
            )

    def _persistence_errors(self) -> CounterMetricFamily:
        errors = CounterMetricFamily(
            PREFIX + "persistence_errors",
            "Failed writes of the state file, the OTLP log spool and the textfile (a full disk?), "
            "and a state file that could not be used at start-up.",
            labels=["file"],
        )
        if self._state is not None:
            errors.add_metric(["state"], self._state.errors)
        if self._spool is not None:
            errors.add_metric(["spool"], self._spool.write_errors)
        if self._textfile is not None:
            errors.add_metric(["textfile"], self._textfile.errors)
        return errors

    def _event_families(self, identity: VMIdentity) -> Iterator[GaugeMetricFamily]:
        """The per-event families. Only two depend on the time of the scrape; the others change only
        when the store does (a new ``events`` mapping) or this VM's name is learned, so they are built
        once per change, not once per scrape."""
        events = self._store.events
        cached = self._cached
        if cached is None or cached[0] is not events or cached[1] != identity:
            states = sorted(events.values(), key=lambda state: state.event.event_id)
            cached = self._cached = (events, identity, *_static_families(states, identity))
        pending, info, not_before, duration = cached[3]
        until, started = _timed_families(cached[2], self._store, self._clock(), self._monotonic())
        yield from (pending, info, not_before, until, duration, started)
        yield self._approved_family()

    def _approved_family(self) -> GaugeMetricFamily:
        """This exporter's accepted approvals of the listed events: an approved event still Scheduled is
        Azure waiting (for NotBefore, or for the host's other tenants), not an event nobody approved."""
        approved = GaugeMetricFamily(
            PREFIX + "event_approved_timestamp_seconds",
            "Unix time this exporter's approval of the event was accepted (listed events only).",
            labels=PER_EVENT,
        )
        if self._approvals is not None:
            events = self._store.events
            for event_id, at in sorted(self._approvals.approved.items()):
                if (state := events.get(event_id)) is not None:
                    approved.add_metric([label(event_id), label(state.event.event_type)], at)
        return approved

    def _health_families(self, status: PollStatus) -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily(PREFIX + "imds_up", "1 if the last IMDS poll succeeded.", value=int(status.up))
        last_success = GaugeMetricFamily(
            PREFIX + "last_successful_poll_timestamp_seconds", "Unix time of the last successful poll."
        )
        if status.last_success is not None:  # absent, not 0 (1970), before the first good poll
            last_success.add_metric([], status.last_success)
        yield last_success
        incarnation = GaugeMetricFamily(PREFIX + "document_incarnation", "Last DocumentIncarnation.")
        if (value := self._store.incarnation) is not None:
            incarnation.add_metric([], value)
        yield incarnation
        api_version = GaugeMetricFamily(
            PREFIX + "imds_api_version_info",
            "The Scheduled Events api-version in use: the first of --imds.api-version that IMDS accepts.",
            labels=["api_version"],
        )
        if status.api_version:  # absent before the first good poll
            api_version.add_metric([status.api_version], 1)
        yield api_version
        info = GaugeMetricFamily(
            PREFIX + "exporter_build_info", "Build information.", labels=["version", "python_version"]
        )
        info.add_metric([self._version, platform.python_version()], 1)
        yield info


_Static = tuple[GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily]

_Timed = list[tuple[list[str], float | None, EventState]]  # labels, NotBefore (Unix time), the state

_Cached = tuple[Mapping[str, EventState], VMIdentity, _Timed, _Static]

PER_EVENT = ["event_id", "event_type"]


def _static_families(states: list[EventState], identity: VMIdentity) -> tuple[_Timed, _Static]:
    """pending, event_info, NotBefore and DurationInSeconds (functions of the listed events alone), and
    what the two time-dependent families need of each event, its labels computed once."""
    pending = GaugeMetricFamily(PREFIX + "pending", "Events now listed.", labels=["event_type", "event_status"])
    counts = dict.fromkeys(KNOWN_LISTINGS, 0)
    for state in states:
        key = (label(state.event.event_type), label(state.event.event_status))
        counts[key] = counts.get(key, 0) + 1
    for (event_type, status), count in sorted(counts.items()):
        pending.add_metric([event_type, status], count)
    info = GaugeMetricFamily(
        PREFIX + "event_info",
        "One series per listed event.",
        labels=[
            "event_id",
            "event_type",
            "event_status",
            "event_source",
            "resource_type",
            "affects_this_vm",
            "impact",
            "cause",
        ],
    )
    not_before = GaugeMetricFamily(
        PREFIX + "event_not_before_timestamp_seconds", "NotBefore as Unix time.", labels=PER_EVENT
    )
    duration = GaugeMetricFamily(
        PREFIX + "event_duration_seconds", "DurationInSeconds as given (-1 unknown).", labels=PER_EVENT
    )
    timed: _Timed = []
    for state in states:
        event = state.event
        labels = [label(event.event_id), label(event.event_type)]
        moment = event.not_before.timestamp() if event.not_before is not None else None
        timed.append((labels, moment, state))
        info.add_metric(
            [
                *labels,
                label(event.event_status),
                label(event.event_source),
                label(event.resource_type),
                affects_label(identity.affects(event.resources)),
                state.impact,
                state.cause,
            ],
            1,
        )
        duration.add_metric(labels, event.duration_seconds)
        if moment is not None:
            not_before.add_metric(labels, moment)
    return timed, (pending, info, not_before, duration)


def _timed_families(
    rows: _Timed, store: EventStore, now: float, mono: float
) -> tuple[GaugeMetricFamily, GaugeMetricFamily]:
    """The two families that depend on the time of the scrape (time in Started on the monotonic clock)."""
    until = GaugeMetricFamily(
        PREFIX + "event_seconds_until_not_before", "NotBefore minus now (negative once passed).", labels=PER_EVENT
    )
    started = GaugeMetricFamily(PREFIX + "event_started_seconds", "Time spent in Started so far.", labels=PER_EVENT)
    for labels, not_before, state in rows:
        if not_before is not None:
            until.add_metric(labels, not_before - now)
        if (seconds := store.started_seconds(state, now, mono)) is not None:
            started.add_metric(labels, seconds)
    return until, started
