"""CPU share of one core and peak RSS at a 1 s poll interval, side by side with the reference loop.

Two in-process simulators (idle, and 100 far-future Scheduled events listed) serve every process
at once: the exporter with OTel off and on (shipping to a real OTLP/HTTP receiver), and the
reference loop. After every process answered its first document, a warm-up passes, then CPU
time is measured over the window: utime+stime of all threads from /proc/<pid>/stat at the start
(clock ticks: up to 10 ms low), and at the end the exact figure of wait4()'s rusage after a SIGKILL
(so no shutdown work is counted); the window figure is therefore at most 10 ms high (0.008 % of a
core over 120 s). Peak RSS is VmHWM and RSS at end VmRSS, from /proc/<pid>/status just before the kill.
Like Prometheus would, the driver scrapes each exporter's /metrics every ``scrape_interval`` s.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

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
    telemetry_module_present,
    wait_all_started,
)

NAME = "footprint"
LOADS = ("idle", "100 events")
KINDS = ("reference loop", "exporter, OTel off", "exporter, OTel on")
Key = tuple[str, str]


def _spawn(sims: dict[str, Any], receiver: Any) -> dict[Key, Proc]:
    processes: dict[Key, Proc] = {}
    for load, sim in sims.items():
        processes[("reference loop", load)] = ReferenceProc(sim.url, name=f"reference-{load}")
        processes[("exporter, OTel off", load)] = ExporterProc(sim.url, name=f"exporter-off-{load}")
        if receiver is not None:
            processes[("exporter, OTel on", load)] = ExporterProc(
                sim.url, otel_env=otel_env(receiver), name=f"exporter-on-{load}"
            )
    wait_all_started(processes.values())
    return processes


def _measure(processes: dict[Key, Proc], window: float, scrape_interval: float) -> tuple[float, dict[Key, Any]]:
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
    # ru_maxrss is no good here: exec() keeps the forking driver's high-water mark in it.
    memory = {key: (proc_status_kib(p.pid, "VmHWM"), proc_status_kib(p.pid, "VmRSS")) for key, p in processes.items()}
    wall = time.monotonic() - began
    measured = {}
    for key, proc in processes.items():
        total, _ = proc.kill_for_rusage()
        measured[key] = (total - start[key], *memory[key])
    return wall, measured


def run(mode: Mode, duration: float | None = None, scrape_interval: float = 15.0) -> Report:
    report = Report(NAME)
    window = duration if duration is not None else mode.pick(120.0, 15.0, 1.5)
    warmup = mode.pick(5.0, 2.0, 0.5)
    with contextlib.ExitStack() as stack:
        receiver = stack.enter_context(otlp_receiver())
        sims = {"idle": stack.enter_context(simulator(0)), "100 events": stack.enter_context(simulator(100, seed=1))}
        processes: dict[Key, Proc] = {}
        try:
            processes = _spawn(sims, receiver)
            time.sleep(warmup)
            wall, measured = _measure(processes, window, scrape_interval)
        finally:
            for proc in processes.values():
                proc.stop()
        spans = len(receiver.store.spans) if receiver is not None else 0
        logs = len(receiver.store.logs) if receiver is not None else 0

    rows: list[list[Any]] = []
    data: dict[str, Any] = {"window_s": wall, "warmup_s": warmup, "scrape_interval_s": scrape_interval, "results": []}
    for load in LOADS:
        ref_cpu = measured[("reference loop", load)][0]
        for what in KINDS:
            if (what, load) not in measured:
                continue
            cpu, hwm, rss = measured[(what, load)]
            share = 100.0 * cpu / wall
            ratio = cpu / ref_cpu if ref_cpu > 0 else float("nan")
            rows.append([what, load, round(share, 3), round(ratio, 2), round(hwm / 1024, 1), round(rss / 1024, 1)])
            data["results"].append(
                {
                    "process": what,
                    "load": load,
                    "cpu_s": cpu,
                    "cpu_pct_of_core": share,
                    "ratio_to_reference": ratio,
                    "peak_rss_mib": hwm / 1024,
                    "rss_mib": rss / 1024,
                }
            )
    report.table(
        f"CPU and memory at 1 s polling ({wall:.0f} s window, /metrics scraped every {scrape_interval:g} s)",
        ["process", "documents", "CPU % of one core", "CPU x reference", "peak RSS MiB", "RSS at end MiB"],
        rows,
    )
    data["otel"] = {"telemetry_module": telemetry_module_present(), "receiver_spans": spans, "receiver_logs": logs}
    report.data = data
    if receiver is not None and spans == 0 and logs == 0:
        report.note(
            "the OTLP receiver got nothing: OTel is not wired into the exporter yet, so 'OTel on' "
            "equals 'OTel off'; re-run once se_exporter/telemetry.py exists"
        )
    elif receiver is not None:
        report.note(f"OTLP receiver got {spans} spans and {logs} log records during the run (OTel is wired)")
    return report
