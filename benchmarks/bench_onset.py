"""CPU in the first minute of an outage: 300 records waiting meet a dead collector, beside the reference loop.

bench_outage measures the steady state of a long outage (10 minutes, backed off to one attempt every
2 minutes). The first minute is different: the shipper's first attempts come quickly (exponential
back-off from a second), and each finds the collector dead. Each repetition starts the reference loop
and an exporter whose spool holds 300 transition records (as an earlier outage left them) and whose
OTLP endpoint is a closed loopback port; the moment the exporter is ready is the onset. CPU is read
from /proc at onset + ``DELAY`` and at onset + ``DELAY`` + ``WINDOW`` (both processes at the same
instants, clock ticks of 10 ms). The figure is the exporter's CPU over the reference loop's in that
window; a run repeats it (three times in full mode) with fresh processes and reports the median and the
spread.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.bench_outage import dead_endpoint, fill_spool
from benchmarks.common import ExporterProc, Mode, ReferenceProc, Report, cpu_seconds, proc_status_kib, simulator

NAME = "onset"
WAITING = 300
DELAY = 13.0
WINDOW = 40.0


def _once(url: str, state_dir: Path, delay: float, window: float) -> dict[str, float]:
    state_file = state_dir / "state.json"
    fill_spool(state_file, WAITING)
    reference = ReferenceProc(url, name="reference")
    exporter = ExporterProc(url, otel_env=dead_endpoint(), extra_args=[f"--state.file={state_file}"], name="onset")
    try:
        reference.wait_first_document()
        exporter.wait_ready()
        onset = time.monotonic()
        time.sleep(max(0.0, onset + delay - time.monotonic()))
        start = {"reference": cpu_seconds(reference.pid), "exporter": cpu_seconds(exporter.pid)}
        time.sleep(max(0.0, onset + delay + window - time.monotonic()))
        end = {"reference": cpu_seconds(reference.pid), "exporter": cpu_seconds(exporter.pid)}
        peak = proc_status_kib(exporter.pid, "VmHWM") / 1024
    finally:
        exporter.stop()
        reference.stop()
    used = {who: end[who] - start[who] for who in start}
    ratio = used["exporter"] / used["reference"] if used["reference"] > 0 else float("nan")
    return {"reference_s": used["reference"], "exporter_s": used["exporter"], "ratio": ratio, "peak_rss_mib": peak}


def run(mode: Mode) -> Report:
    report = Report(NAME)
    repeats = mode.pick(3, 1, 1)
    delay, window = mode.pick((DELAY, WINDOW), (DELAY, WINDOW), (1.0, 2.0))
    runs: list[dict[str, float]] = []
    with simulator(0) as sim:
        for _ in range(repeats):
            with tempfile.TemporaryDirectory(prefix="se-bench-onset-") as state_dir:
                runs.append(_once(sim.url, Path(state_dir), delay, window))
    rows: list[list[Any]] = [
        [index, round(1000 * r["reference_s"]), round(1000 * r["exporter_s"]), f"{r['ratio']:.2f}x", r["peak_rss_mib"]]
        for index, r in enumerate(runs, start=1)
    ]
    report.table(
        f"CPU from {delay:g} s to {delay + window:g} s after {WAITING} records met a dead collector (ms)",
        ["run", "reference loop", "exporter", "exporter x reference", "exporter peak RSS MiB"],
        rows,
    )
    ratios = [r["ratio"] for r in runs]
    report.note(f"median {statistics.median(ratios):.2f}x (spread {min(ratios):.2f}-{max(ratios):.2f}x)")
    report.data = {"delay_s": delay, "window_s": window, "waiting": WAITING, "runs": runs}
    return report
