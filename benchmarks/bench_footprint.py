"""CPU share of one core and peak RSS at a 1 s poll interval, side by side with the reference loop.

Two in-process simulators (idle, and 100 far-future Scheduled events listed) serve every process at
once: the exporter with OTel off and on (shipping to a real OTLP/HTTP receiver), and the reference loop;
on the idle one also an exporter whose collector is dead (a closed loopback port) with 1,000 transition
records waiting in its spool, as an outage leaves them. After every process answered its first document
and a warm-up passed, CPU time is read in ``windows`` consecutive windows of ``window`` seconds (five of
60 s in full mode). Every process runs through every window, so each window holds both sides of each
comparison (A and B in the same 60 s, which A B A B alternation only approximates): a window's ratio is
the exporter's CPU over the reference loop's in that window, and the figure is the median of the
windows' ratios with their spread (min-max). CPU time is the kernel's process CPU clock, to the
nanosecond (``cpu_seconds``). Peak RSS is VmHWM and RSS at end VmRSS, from /proc/<pid>/status at the
end. Like Prometheus would, the driver scrapes each exporter's /metrics every ``scrape_interval`` s.
"""

from __future__ import annotations

import contextlib
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.bench_outage import WAITING, dead_endpoint, fill_spool
from benchmarks.common import (
    ExporterProc,
    Mode,
    Proc,
    ReferenceProc,
    Report,
    cpu_seconds,
    otel_env,
    otlp_receiver,
    proc_status_kib,
    simulator,
    spread,
    wait_all_started,
)

NAME = "footprint"
LOADS = ("idle", "100 events")
DEAD = "exporter, OTel on, dead collector, 1,000 waiting"
KINDS = ("reference loop", "exporter, OTel off", "exporter, OTel on", DEAD)
Key = tuple[str, str]


def _spawn(sims: dict[str, Any], receiver: Any, state_dir: Path) -> dict[Key, Proc]:
    processes: dict[Key, Proc] = {}
    fill_spool(state_dir / "state.json", WAITING)
    processes[(DEAD, "idle")] = ExporterProc(
        sims["idle"].url, otel_env=dead_endpoint(), extra_args=[f"--state.file={state_dir / 'state.json'}"], name="dead"
    )
    for load, sim in sims.items():
        processes[("reference loop", load)] = ReferenceProc(sim.url, name=f"reference-{load}")
        processes[("exporter, OTel off", load)] = ExporterProc(sim.url, name=f"exporter-off-{load}")
        if receiver is not None:
            processes[("exporter, OTel on", load)] = ExporterProc(
                sim.url, otel_env=otel_env(receiver), name=f"exporter-on-{load}"
            )
    wait_all_started(processes.values())
    return processes


def _window(processes: dict[Key, Proc], window: float, scrape_interval: float) -> tuple[float, dict[Key, float]]:
    """CPU seconds of each process over one window of ``window`` seconds (and the window's length)."""
    start = {key: cpu_seconds(p.pid) for key, p in processes.items()}
    began = time.monotonic()
    next_scrape = began
    while (elapsed := time.monotonic() - began) < window:
        if scrape_interval > 0 and time.monotonic() >= next_scrape:
            for proc in processes.values():
                if isinstance(proc, ExporterProc):
                    proc.metrics()
            next_scrape += scrape_interval
        time.sleep(min(0.2, max(0.0, window - elapsed)))
    used = {key: cpu_seconds(p.pid) - start[key] for key, p in processes.items()}
    return time.monotonic() - began, used


def run(mode: Mode, duration: float | None = None, scrape_interval: float = 15.0) -> Report:
    report = Report(NAME)
    window = duration if duration is not None else mode.pick(60.0, 15.0, 1.0)
    count = mode.pick(5, 3, 1)
    warmup = mode.pick(10.0, 3.0, 0.5)
    windows: list[tuple[float, dict[Key, float]]] = []
    with contextlib.ExitStack() as stack:
        receiver = stack.enter_context(otlp_receiver())
        sims = {"idle": stack.enter_context(simulator(0)), "100 events": stack.enter_context(simulator(100, seed=1))}
        processes: dict[Key, Proc] = {}
        try:
            processes = _spawn(sims, receiver, Path(stack.enter_context(tempfile.TemporaryDirectory())))
            time.sleep(warmup)
            windows = [_window(processes, window, scrape_interval) for _ in range(count)]
            # ru_maxrss is no good here: exec() keeps the forking driver's high-water mark in it.
            memory = {
                key: (proc_status_kib(p.pid, "VmHWM"), proc_status_kib(p.pid, "VmRSS")) for key, p in processes.items()
            }
        finally:
            for proc in processes.values():
                proc.stop()
        spans = len(receiver.store.spans) if receiver is not None else 0
        logs = len(receiver.store.logs) if receiver is not None else 0
    _tabulate(report, windows, memory, scrape_interval)
    report.data["otel"] = {"receiver_spans": spans, "receiver_logs": logs}
    if receiver is not None:
        report.note(f"OTLP receiver got {spans} spans and {logs} log records during the run")
    return report


def _tabulate(
    report: Report, windows: list[tuple[float, dict[Key, float]]], memory: dict[Key, Any], scrape: float
) -> None:
    rows: list[list[Any]] = []
    results = []
    for load in LOADS:
        reference = [used[("reference loop", load)] for _, used in windows]
        for what in KINDS:
            if (what, load) not in memory:
                continue
            shares = [100.0 * used[(what, load)] / wall for wall, used in windows]
            ratios = [used[(what, load)] / ref for (_, used), ref in zip(windows, reference, strict=True) if ref > 0]
            hwm, rss = memory[(what, load)]
            rows.append(
                [
                    what,
                    load,
                    spread(shares, 3),
                    spread(ratios),
                    round(hwm / 1024, 1),
                    round(hwm / memory[("reference loop", load)][0], 2),
                    round(rss / 1024, 1),
                ]
            )
            results.append(
                {
                    "process": what,
                    "load": load,
                    "cpu_pct_of_core": shares,
                    "ratio_to_reference": ratios,
                    "ratio_median": statistics.median(ratios) if ratios else None,
                    "peak_rss_mib": hwm / 1024,
                    "rss_mib": rss / 1024,
                }
            )
    lengths = [wall for wall, _ in windows]
    report.table(
        f"CPU and memory at 1 s polling: {len(windows)} windows of {statistics.median(lengths):.0f} s, median (min-max)"
        f" of the windows, /metrics scraped every {scrape:g} s",
        [
            "process",
            "documents",
            "CPU % of one core",
            "CPU x reference",
            "peak RSS MiB",
            "peak RSS x reference",
            "RSS at end MiB",
        ],
        rows,
    )
    report.data.update({"windows_s": lengths, "scrape_interval_s": scrape, "results": results})
