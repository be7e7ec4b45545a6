"""A simulated fleet's series, written as OpenMetrics for ``promtool tsdb create-blocks-from openmetrics``.

Every VM exposes what a real exporter exposes (the names and labels of docs/design.md; `up` too, as
Prometheus records it), idle most of the time, through three stories that move through the fleet:

- a platform maintenance wave: 30 % of the VMs get a Reboot, one fault domain (of five) after the
  other, 40 minutes apart: Scheduled 15 minutes, Started 5 minutes, then gone;
- live migrations: 10 % of the VMs get a Freeze ("Live Migration"), spread over two hours;
- a Spot eviction burst: 5 % of the VMs get a Preempt (30 s notice) at the same minute, then vanish
  (their series end, as an evicted VM's exporter does).

Values are computed from the timeline (counters only grow, histograms observe what happened), so
the dashboards and the rules see the same data a real fleet would give them.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TextIO

from se_exporter import __version__

P = "azure_scheduled_events_"
JOB = "se-exporter"
TYPES = ("Freeze", "Reboot", "Redeploy", "Preempt", "Terminate")
STATUSES = ("Scheduled", "Started")
TRANSITIONS = ("scheduled", "started", "completed", "cancelled", "rescheduled")
REQUEST_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 120)
STARTED_BUCKETS = (5, 10, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200)
NOTICE_BUCKETS = (30, 60, 300, 600, 900, 1800, 3600, 7200, 21600, 86400, 259200, 604800, 1209600)
POLL_ERROR_REASONS = ("timeout", "connection", "http_4xx", "http_5xx", "throttled", "invalid_document")


@dataclass(frozen=True, slots=True)
class Event:
    event_id: str
    event_type: str
    source: str
    impact: str
    cause: str
    scheduled: float  # first sighting
    started: float  # NotBefore (it starts then)
    ended: float  # removed


@dataclass(frozen=True, slots=True)
class VM:
    instance: str
    events: tuple[Event, ...]
    gone: float  # its series end here (a Spot VM evicted), or +inf


def fleet(vms: int, start: float, hours: float) -> list[VM]:
    out = []
    for i in range(vms):
        events = []
        fault_domain = i % 5
        if i % 10 < 3:  # the wave, one fault domain after the other
            at = start + 3600 * min(1.0, hours / 6) + fault_domain * 2400 * hours / 6
            events.append(
                Event(f"wave-{fault_domain}", "Reboot", "Platform", "reboot", "platform", at, at + 900, at + 1200)
            )
        if i % 10 == 3:
            at = start + hours * 3600 / 3 + (i % 120) * 60 * hours / 6
            events.append(Event(f"lm-{i}", "Freeze", "Platform", "live_migration", "platform", at, at + 900, at + 960))
        gone = float("inf")
        if i % 20 == 7:
            at = start + hours * 3600 * 2 / 3
            events.append(Event(f"spot-{i}", "Preempt", "Platform", "eviction", "platform", at, at + 30, at + 90))
            gone = at + 90
        out.append(VM(f"vm-{i:05d}:10160", tuple(events), gone))
    return out


def write_openmetrics(
    out: TextIO, vms: list[VM], start: float, end: float, step: float, *, millis: bool = False
) -> int:
    """Every family of every VM from ``start`` to ``end``; returns the number of samples written. ``millis``:
    timestamps in milliseconds, as Prometheus' text format has them (VictoriaMetrics' import reads that)."""
    scale = 1000.0 if millis else 1.0
    times = [start + k * step for k in range(int((end - start) // step) + 1)]
    written = 0
    for family, kind, series in _families(vms, times):
        out.write(f"# TYPE {family} {kind}\n")
        for name, labels, points in series:
            prefix = f"{name}{{{labels}}} "
            out.write("".join(f"{prefix}{value:.15g} {t * scale:.0f}\n" for t, value in points))
            written += len(points)
    out.write("# EOF\n")
    return written


Series = tuple[str, str, list[tuple[float, float]]]  # name, labels, (time, value)...


def _families(vms: list[VM], times: list[float]) -> Iterator[tuple[str, str, Iterator[Series]]]:
    yield "up", "gauge", _per_vm(vms, times, lambda vm, t: [("up", "", 1.0)])
    yield (
        P + "exporter_build_info",
        "gauge",
        _per_vm(
            vms,
            times,
            lambda vm, t: [(P + "exporter_build_info", f'version="{__version__}",python_version="3.11.7"', 1.0)],
        ),
    )
    yield P + "imds_up", "gauge", _per_vm(vms, times, lambda vm, t: [(P + "imds_up", "", 1.0)])
    yield (
        P + "last_successful_poll_timestamp_seconds",
        "gauge",
        _per_vm(vms, times, lambda vm, t: [(P + "last_successful_poll_timestamp_seconds", "", t - 0.4)]),
    )
    yield (
        P + "document_incarnation",
        "gauge",
        _per_vm(vms, times, lambda vm, t: [(P + "document_incarnation", "", 1.0 + _changes(vm, t))]),
    )
    yield P + "pending", "gauge", _per_vm(vms, times, _pending)
    yield P + "event_info", "gauge", _per_vm(vms, times, _info)
    yield P + "event_seconds_until_not_before", "gauge", _per_vm(vms, times, _until)
    yield P + "event_not_before_timestamp_seconds", "gauge", _per_vm(vms, times, _not_before)
    yield P + "event_duration_seconds", "gauge", _per_vm(vms, times, _duration)
    yield P + "event_started_seconds", "gauge", _per_vm(vms, times, _started_for)
    yield P + "transitions", "counter", _per_vm(vms, times, _transitions)
    yield (
        P + "poll_errors",
        "counter",
        _per_vm(
            vms,
            times,
            lambda vm, t: [(P + "poll_errors_total", f'reason="{reason}"', 0.0) for reason in POLL_ERROR_REASONS],
        ),
    )
    yield (
        P + "imds_requests",
        "counter",
        _per_vm(
            vms, times, lambda vm, t: [(P + "imds_requests_total", 'method="GET",code="200"', t - times[0] + 3600.0)]
        ),
    )
    yield (
        P + "persistence_errors",
        "counter",
        _per_vm(vms, times, lambda vm, t: [(P + "persistence_errors_total", 'file="state"', 0.0)]),
    )
    yield P + "imds_request_duration_seconds", "histogram", _per_vm(vms, times, _request_durations)
    yield P + "notice_seconds", "histogram", _per_vm(vms, times, _notice)
    yield P + "started_duration_seconds", "histogram", _per_vm(vms, times, _started_duration)


def _per_vm(vms: list[VM], times: list[float], values: object) -> Iterator[Series]:
    """Group the (name, labels, value) triples ``values(vm, t)`` gives into series, one VM at a time."""
    for vm in vms:
        alive = times[: bisect.bisect_left(times, vm.gone)]
        series: dict[tuple[str, str], list[tuple[float, float]]] = {}
        for t in alive:
            for name, labels, value in values(vm, t):  # type: ignore[operator]
                series.setdefault((name, labels), []).append((t, value))
        for (name, labels), points in series.items():
            yield name, f'job="{JOB}",instance="{vm.instance}"' + (f",{labels}" if labels else ""), points


def _listed(vm: VM, t: float) -> list[tuple[Event, str]]:
    return [(e, "Started" if t >= e.started else "Scheduled") for e in vm.events if e.scheduled <= t < e.ended]


def _changes(vm: VM, t: float) -> int:
    return sum((e.scheduled <= t) + (e.started <= t) + (e.ended <= t) for e in vm.events)


def _pending(vm: VM, t: float) -> list[tuple[str, str, float]]:
    listed = _listed(vm, t)
    return [
        (
            P + "pending",
            f'event_type="{kind}",event_status="{status}"',
            float(sum(1 for e, s in listed if e.event_type == kind and s == status)),
        )
        for kind in TYPES
        for status in STATUSES
    ]


def _info(vm: VM, t: float) -> list[tuple[str, str, float]]:
    return [
        (
            P + "event_info",
            f'event_id="{e.event_id}",event_type="{e.event_type}",event_status="{status}",'
            f'event_source="{e.source}",resource_type="VirtualMachine",affects_this_vm="true",'
            f'impact="{e.impact}",cause="{e.cause}"',
            1.0,
        )
        for e, status in _listed(vm, t)
    ]


def _ids(e: Event) -> str:
    return f'event_id="{e.event_id}",event_type="{e.event_type}"'


def _until(vm: VM, t: float) -> list[tuple[str, str, float]]:
    return [
        (P + "event_seconds_until_not_before", _ids(e), e.started - t) for e, s in _listed(vm, t) if s == "Scheduled"
    ]


def _not_before(vm: VM, t: float) -> list[tuple[str, str, float]]:
    return [
        (P + "event_not_before_timestamp_seconds", _ids(e), e.started) for e, s in _listed(vm, t) if s == "Scheduled"
    ]


def _duration(vm: VM, t: float) -> list[tuple[str, str, float]]:
    return [
        (P + "event_duration_seconds", _ids(e), 5.0 if e.event_type == "Freeze" else -1.0) for e, _ in _listed(vm, t)
    ]


def _started_for(vm: VM, t: float) -> list[tuple[str, str, float]]:
    return [(P + "event_started_seconds", _ids(e), t - e.started) for e, s in _listed(vm, t) if s == "Started"]


def _transitions(vm: VM, t: float) -> list[tuple[str, str, float]]:
    counts = dict.fromkeys(((kind, step) for kind in TYPES for step in TRANSITIONS), 0.0)
    for e in vm.events:
        counts[(e.event_type, "scheduled")] += e.scheduled <= t
        counts[(e.event_type, "started")] += e.started <= t
        counts[(e.event_type, "completed")] += e.ended <= t
    return [  # like the exporter: a series from its first count
        (P + "transitions_total", f'event_type="{kind}",transition="{step}"', value)
        for (kind, step), value in counts.items()
        if value
    ]


Row = tuple[str, str, float]


def _histogram(name: str, labels: str, buckets: tuple[float, ...], observed: list[float]) -> list[Row]:
    sep = "," if labels else ""
    rows = [
        (name + "_bucket", f'{labels}{sep}le="{bound:g}"', float(sum(v <= bound for v in observed)))
        for bound in buckets
    ]
    rows.append((name + "_bucket", f'{labels}{sep}le="+Inf"', float(len(observed))))
    rows.append((name + "_count", labels, float(len(observed))))
    rows.append((name + "_sum", labels, float(sum(observed))))
    return rows


def _request_durations(vm: VM, t: float) -> list[tuple[str, str, float]]:
    polls = t - 1_000_000.0  # a poll a second since long before the window; 1.5 ms each, all under 5 ms
    name = P + "imds_request_duration_seconds"
    rows = [(name + "_bucket", f'method="GET",le="{bound:g}"', polls) for bound in REQUEST_BUCKETS]
    return [
        *rows,
        (name + "_bucket", 'method="GET",le="+Inf"', polls),
        (name + "_count", 'method="GET"', polls),
        (name + "_sum", 'method="GET"', polls * 0.0015),
    ]


def _notice(vm: VM, t: float) -> list[tuple[str, str, float]]:
    return _per_type(
        vm, "notice_seconds", NOTICE_BUCKETS, lambda e: e.scheduled <= t, lambda e: e.started - e.scheduled
    )


def _started_duration(vm: VM, t: float) -> list[tuple[str, str, float]]:
    return _per_type(
        vm, "started_duration_seconds", STARTED_BUCKETS, lambda e: e.ended <= t, lambda e: e.ended - e.started
    )


def _per_type(
    vm: VM, name: str, buckets: tuple[float, ...], seen: Callable[[Event], bool], value: Callable[[Event], float]
) -> list[tuple[str, str, float]]:
    """A histogram per EventType of what ``value`` gives for the events ``seen`` so far."""
    rows = []
    for kind in sorted({e.event_type for e in vm.events if seen(e)}):
        observed = [value(e) for e in vm.events if e.event_type == kind and seen(e)]
        rows += _histogram(P + name, f'event_type="{kind}"', buckets, observed)
    return rows
