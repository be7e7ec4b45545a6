"""Detection latency at 1 s polling: IMDS change → visible on /metrics, → transition log record.

An in-process simulator (real time) alternately adds a far-future Scheduled event and cancels it,
each change at a chosen phase after one of the exporter's polls (known from the simulator's request
records): the phases are stratified over 0..interval and shuffled, so the time to the next poll is
spread evenly, as for random changes, without the ±65 ms sampling noise of 60 uniform draws on p50.
The change instant is the simulator's ground truth
(``world.truth``: the real wall time the document changed). Then:

- ``/metrics``: a driver thread scrapes ``/metrics`` every ~10 ms (plus the scrape time);
  the change is visible at the start of the first scrape showing its ``document_incarnation``
  (resolution: one scrape period).
- ``stderr log``: arrival time of the exporter's ``transition=<kind>`` line on its stderr pipe.
- ``OTLP log``: arrival of the ``scheduled_event.transition`` record at the OTLP receiver (only
  when OTel is wired; includes the SDK's batch delay).

Theory: the changes' phases spread the wait for the next poll evenly over 0..interval, so its mean
is interval / 2 and its p99 is 0.99 x interval; what the table shows above that (mean - theory) is the
exporter's own delay plus the scraper's resolution (~10 ms). (The p50 of evenly spread phases is
not a good estimator here: with 60 changes it is 491.7 ms, not 500.) ``poll request → visible``
isolates the exporter's own part: from the poll request that fetched the change (as the simulator
recorded it) to the change visible on /metrics. Measured with 1 event listed (the one that changes)
and with 100 (99 more listed all along).
"""

from __future__ import annotations

import contextlib
import functools
import random
import threading
import time
from typing import Any

from benchmarks.common import (
    FAR_NOTICE,
    ExporterProc,
    Mode,
    Report,
    http_get,
    metric_value,
    otel_env,
    otlp_receiver,
    percentile,
    simulator,
    wait_until,
)

NAME = "detection"
INCARNATION = "azure_scheduled_events_document_incarnation"


class _Scraper(threading.Thread):
    def __init__(self, url: str, period: float) -> None:
        super().__init__(name="scraper", daemon=True)
        # The whole /metrics, as Prometheus scrapes it (not ?name[]=…).
        self.url = f"{url}/metrics"
        self.period = period
        self.samples: list[tuple[float, float]] = []  # (request start wall time, incarnation)
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            began = time.time()
            with contextlib.suppress(OSError):
                code, body = http_get(self.url, timeout=2)
                value = metric_value(body.decode(), INCARNATION) if code == 200 else None
                if value is not None:
                    self.samples.append((began, value))
            self.stop.wait(self.period)

    def first_at_least(self, incarnation: int, after: float) -> float | None:
        return next((t for t, v in list(self.samples) if v >= incarnation and t >= after - 0.05), None)


def _sleep_until_phase(world: Any, phase: float, interval: float) -> None:
    """Sleep until ``phase`` seconds after a poll of the exporter (as the simulator saw it)."""
    time.sleep(0.05)
    polls = [r.real_time for r in world.truth.requests() if r.path.startswith("/metadata/scheduledevents")]
    target = (polls[-1] if polls else time.time()) + phase
    while target < time.time() + 0.01:
        target += interval
    time.sleep(target - time.time())


def _otlp_latency(watcher: _OTLPWatcher, key: tuple[str, str], changed_at: float) -> list[float]:
    try:
        seen = wait_until(lambda: watcher.seen.get(key), 3.0, "OTLP log")
    except AssertionError:  # wait_until's timeout
        return []
    return [(seen - changed_at) * 1000]


def _log_arrival(proc: ExporterProc, event_id: str, kind: str) -> float | None:
    needle = f"transition={kind}"
    return next((t for t, line in list(proc.stamped) if needle in line and event_id in line), None)


class _OTLPWatcher(threading.Thread):
    def __init__(self, receiver: Any) -> None:
        super().__init__(name="otlp-watch", daemon=True)
        self.receiver = receiver
        self.seen: dict[tuple[str, str], float] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.005):
            now = time.time()
            for record in self.receiver.store.logs:
                if record.event_name != "scheduled_event.transition":
                    continue
                key = (
                    str(record.attributes.get("scheduled_event.id")),
                    str(record.attributes.get("scheduled_event.transition")),
                )
                self.seen.setdefault(key, now)


def run(mode: Mode, interval: float = 1.0) -> Report:
    report = Report(NAME)
    report.data = {}
    for listed in (1, 100) if mode.name != "tiny" else (1,):
        _run_listed(report, mode, interval, listed)
    return report


def _run_listed(report: Report, mode: Mode, interval: float, listed: int) -> None:
    from se_exporter.simulator import EventPlan

    changes = mode.pick(60, 16, 2)
    rng = random.Random(42)
    metrics_lat: list[float] = []
    log_lat: list[float] = []
    otlp_lat: list[float] = []
    pickup: list[float] = []  # the exporter's own delay: the poll that fetched the change → visible
    with contextlib.ExitStack() as stack:
        receiver = stack.enter_context(otlp_receiver())
        sim = stack.enter_context(simulator(listed - 1))
        world = sim.world
        env = otel_env(receiver) if receiver is not None else None
        exporter = ExporterProc(
            sim.url, otel_env=env, interval=f"{interval}s", extra_args=["--vm.name=sim-vm-0"], name="exporter"
        )
        stack.callback(exporter.stop)
        exporter.wait_ready()
        scraper = _Scraper(exporter.url, 0.01)
        scraper.start()
        stack.callback(scraper.stop.set)
        watcher = _OTLPWatcher(receiver) if receiver is not None else None
        if watcher is not None:
            watcher.start()
            stack.callback(watcher.stop.set)
        event_id: str | None = None
        # Stratified phases (shuffled): the wait for the next poll spreads evenly over 0..interval,
        # so the measured p50 converges on theory + the exporter's own delay, not on sampling noise.
        phases = [(k + 0.5) / changes * interval for k in range(changes)]
        rng.shuffle(phases)
        for phase in phases:
            _sleep_until_phase(world, phase, interval)
            if event_id is None:
                event_id, kind = world.add_event(EventPlan(event_type="Freeze", notice=FAR_NOTICE)), "scheduled"
            else:
                world.cancel_event(event_id)
                kind = "cancelled"
            change = next(c for c in reversed(world.truth.changes()) if c.event_id == event_id)
            seen_metrics = wait_until(
                functools.partial(scraper.first_at_least, change.incarnation, change.real_time),
                interval * 5 + 5,
                "change on /metrics",
            )
            seen_log = wait_until(functools.partial(_log_arrival, exporter, event_id, kind), 5, "transition line")
            polled = next(
                (
                    r.real_time
                    for r in world.truth.requests()
                    if r.path.startswith("/metadata/scheduledevents") and r.real_time >= change.real_time
                ),
                None,
            )
            if polled is not None:
                pickup.append((seen_metrics - polled) * 1000)
            metrics_lat.append((seen_metrics - change.real_time) * 1000)
            log_lat.append((seen_log - change.real_time) * 1000)
            if watcher is not None and (otlp_lat or len(log_lat) <= 2):  # give up if OTel is not wired
                otlp_lat += _otlp_latency(watcher, (event_id, kind), change.real_time)
            if kind == "cancelled":
                event_id = None
        ready_code = http_get(exporter.url + "/-/ready")[0]
    theory = interval / 2 * 1000
    _table(
        report,
        interval,
        theory,
        listed,
        {
            "visible on /metrics": metrics_lat,
            "transition line on stderr": log_lat,
            "OTLP log record at receiver": otlp_lat,
            "poll request → visible on /metrics": pickup,
        },
    )
    if not otlp_lat:
        report.note("no OTLP transition records arrived: OTel is not wired yet (or disabled); OTLP row is n/a")
    report.data[f"{listed}_listed"] = {
        "interval_s": interval,
        "theory_mean_ms": theory,
        "metrics_ms": metrics_lat,
        "log_ms": log_lat,
        "otlp_ms": otlp_lat,
        "pickup_ms": pickup,
        "ready_after": ready_code,
    }


def _table(report: Report, interval: float, theory: float, listed: int, series: dict[str, list[float]]) -> None:
    rows: list[list[Any]] = []
    for what, values in series.items():
        if not values:
            rows.append([what, 0, "n/a", "n/a", "n/a", "n/a"])
            continue
        mean = sum(values) / len(values)
        rows.append(
            [what, len(values), *(round(v, 1) for v in (mean, percentile(values, 99), max(values), mean - theory))]
        )
    report.table(
        f"Detection latency at {interval:g} s polling, {listed} event(s) listed (ms; theory: mean "
        f"{theory:.0f} ms, p99 {interval * 990:.0f} ms)",
        ["signal", "changes", "mean ms", "p99 ms", "max ms", "mean - theory ms"],
        rows,
    )
