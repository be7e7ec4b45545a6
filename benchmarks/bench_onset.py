"""CPU in the first two minutes after a burst of 150 events with the collector dead, beside the reference loop.

bench_outage measures the steady state of a long outage (10 minutes, backed off to one attempt every
2 minutes). The first minutes after a burst are different: 150 events appear at once, each makes a
transition record (logged, spooled, to be shipped) and a lifecycle span, and the shipper's first
attempts come quickly (exponential back-off from a second), each finding the collector dead.

Each repetition starts, on a fresh idle simulator, the reference loop and an exporter with OTel on
whose OTLP endpoint is a closed loopback port (``--state.file``: the records go to the durable spool).
Once both answered and a warm-up passed, the burst appears, and both processes' CPU is read at that
moment and ``window`` seconds later (120 s in full mode), to the nanosecond (``cpu_seconds``). A
repetition's figure is the exporter's CPU over the reference loop's in that same window; a run
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
    ReferenceProc,
    Report,
    add_events,
    cpu_seconds,
    proc_status_kib,
    simulator,
    spread,
    wait_until,
)

NAME = "onset"
BURST = 150
WINDOW = 120.0
WARMUP = 5.0


def _once(state_dir: Path, window: float, warmup: float) -> dict[str, float]:
    with simulator(0) as sim:
        reference = ReferenceProc(sim.url, name="reference")
        exporter = ExporterProc(
            sim.url, otel_env=dead_endpoint(), extra_args=[f"--state.file={state_dir / 'state.json'}"], name="onset"
        )
        try:
            reference.wait_first_document()
            exporter.wait_ready()
            time.sleep(warmup)
            start = {"reference": cpu_seconds(reference.pid), "exporter": cpu_seconds(exporter.pid)}
            burst = time.monotonic()
            add_events(sim.world, BURST, "burst event")
            time.sleep(max(0.0, burst + window - time.monotonic()))
            end = {"reference": cpu_seconds(reference.pid), "exporter": cpu_seconds(exporter.pid)}
            peak = proc_status_kib(exporter.pid, "VmHWM") / 1024
            # Proof the burst was seen (after the window: this scrape is not counted).
            wait_until(lambda: _listed(exporter) == BURST, 10, f"{BURST} events on /metrics")
        finally:
            exporter.stop()
            reference.stop()
    used = {who: end[who] - start[who] for who in start}
    ratio = used["exporter"] / used["reference"] if used["reference"] > 0 else float("nan")
    return {"reference_s": used["reference"], "exporter_s": used["exporter"], "ratio": ratio, "peak_rss_mib": peak}


def _listed(exporter: ExporterProc) -> float:
    """Events listed, by /metrics (the sum of ``azure_scheduled_events_pending`` over types and statuses)."""
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
            round(1000 * r["reference_s"], 1),
            round(1000 * r["exporter_s"], 1),
            f"{r['ratio']:.2f}",
            r["peak_rss_mib"],
        ]
        for index, r in enumerate(runs, start=1)
    ]
    report.table(
        f"CPU in the {window:g} s after {BURST} events appeared at once, the collector dead (ms)",
        ["run", "reference loop", "exporter", "exporter x reference", "exporter peak RSS MiB"],
        rows,
    )
    ratios = [r["ratio"] for r in runs]
    report.note(f"exporter x reference: {spread(ratios)} (median (min-max) of {len(runs)} runs)")
    report.data = {
        "window_s": window,
        "warmup_s": warmup,
        "burst": BURST,
        "runs": runs,
        "median": statistics.median(ratios),
    }
    return report
