"""CPU in the first two minutes after a burst of 150 events with the collector dead, beside the design's stack
used plainly (reference_stack.py, its collector dead too) and the urllib loop.

bench_outage measures the steady state of a long outage (10 minutes, backed off to one attempt every
2 minutes). The first minutes after a burst are different: 150 events appear at once, each makes a
transition record (logged, spooled, to be shipped) and a lifecycle span, and the shipper's first
attempts come quickly (exponential back-off from a second), each finding the collector dead.

Each repetition starts, on a fresh idle simulator, the urllib loop, the script and an exporter with OTel
on, whose OTLP endpoints are a closed loopback port (``--state.file``: the exporter's records go to the
durable spool; the script's batch processors drop what they cannot send).
Once both answered and a warm-up passed, the burst appears, and both processes' CPU is read at that
moment and ``window`` seconds later (120 s in full mode), to the nanosecond (``cpu_seconds``). A
repetition's figure is the exporter's CPU over the script's in that same window; a run
repeats it five times with fresh processes and reports the median and the spread (min-max).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.bench_outage import dead_endpoint
from benchmarks.common import (
    ExporterProc,
    Mode,
    Proc,
    ReferenceProc,
    Report,
    StackScriptProc,
    add_events,
    cpu_seconds,
    proc_status_kib,
    simulator,
    spread,
    wait_all_started,
    wait_until,
)

NAME = "onset"
BURST = 150
WINDOW = 120.0
WARMUP = 5.0


def _once(state_dir: Path, window: float, warmup: float) -> dict[str, float]:
    with simulator(0) as sim:
        processes: dict[str, Proc] = {
            "loop": ReferenceProc(sim.url, name="reference"),
            "script": StackScriptProc(sim.url, otel_env=dead_endpoint(), name="script"),
            "exporter": ExporterProc(
                sim.url, otel_env=dead_endpoint(), extra_args=[f"--state.file={state_dir / 'state.db'}"], name="onset"
            ),
        }
        try:
            wait_all_started(processes.values())
            time.sleep(warmup)
            start = {who: cpu_seconds(proc.pid) for who, proc in processes.items()}
            burst = time.monotonic()
            add_events(sim.world, BURST, "burst event")
            time.sleep(max(0.0, burst + window - time.monotonic()))
            end = {who: cpu_seconds(proc.pid) for who, proc in processes.items()}
            peaks = {
                f"{who}_peak_rss_mib": proc_status_kib(proc.pid, "VmHWM") / 1024 for who, proc in processes.items()
            }
            # Proof the burst was seen (after the window: this scrape is not counted).
            wait_until(lambda: _listed(processes["exporter"]) == BURST, 10, f"{BURST} events on /metrics")
        finally:
            for proc in processes.values():
                proc.stop()
    used = {f"{who}_s": end[who] - start[who] for who in start}
    ratio = used["exporter_s"] / used["script_s"] if used["script_s"] > 0 else float("nan")
    floor = used["exporter_s"] / used["loop_s"] if used["loop_s"] > 0 else float("nan")
    return {**used, **peaks, "ratio": ratio, "ratio_to_loop": floor}


def _listed(exporter: Proc) -> float:
    """Events listed, by /metrics (the sum of ``azure_scheduled_events_pending`` over types and statuses)."""
    assert isinstance(exporter, ExporterProc)
    lines = exporter.metrics().splitlines()
    return sum(float(line.rsplit(" ", 1)[1]) for line in lines if line.startswith("azure_scheduled_events_pending{"))


def run(mode: Mode) -> Report:
    report = Report(NAME)
    repeats = mode.pick(5, 2, 1)
    window, warmup = mode.pick((WINDOW, WARMUP), (30.0, 3.0), (2.0, 0.5))
    runs: list[dict[str, float]] = []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory(prefix="se-bench-onset-") as state_dir:
            runs.append(_once(Path(state_dir), window, warmup))
    rows: list[list[Any]] = [
        [
            index,
            round(1000 * r["loop_s"], 1),
            round(1000 * r["script_s"], 1),
            round(1000 * r["exporter_s"], 1),
            f"{r['ratio']:.2f}",
            f"{r['ratio_to_loop']:.2f}",
            round(r["script_peak_rss_mib"], 1),
            round(r["exporter_peak_rss_mib"], 1),
        ]
        for index, r in enumerate(runs, start=1)
    ]
    report.table(
        f"CPU in the {window:g} s after {BURST} events appeared at once, the collector dead (ms)",
        [
            "run",
            "urllib loop",
            "script (the stack, plainly)",
            "exporter",
            "exporter x script",
            "exporter x urllib loop",
            "script peak RSS MiB",
            "exporter peak RSS MiB",
        ],
        rows,
    )
    ratios = [r["ratio"] for r in runs]
    report.note(f"exporter x script: {spread(ratios)} (median (min-max) of {len(runs)} runs)")
    report.note(f"exporter x urllib loop: {spread([r['ratio_to_loop'] for r in runs])}")
    report.data = {
        "window_s": window,
        "warmup_s": warmup,
        "burst": BURST,
        "runs": runs,
        "median": statistics.median(ratios),
    }
    return report
