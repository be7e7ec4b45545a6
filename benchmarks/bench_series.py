"""Series per VM, idle and with one event: what a 10,000-VM fleet costs Prometheus.

A real exporter (OTel off, 1 s polling) against an in-process simulator: scraped idle, then with
one Scheduled Freeze listed, then after it started and completed (the histograms and counters
that a first event leaves behind stay). Every non-comment line of the text exposition is one
series. Prometheus's head block costs roughly 1-3 KiB of memory per active series; the
extrapolation uses 2 KiB as a round figure.
"""

from __future__ import annotations

import collections
import time
from typing import Any

from benchmarks.common import ExporterProc, Mode, Report, count_samples, metric_value, simulator, wait_until

NAME = "series"
FLEET = 10_000
BYTES_PER_SERIES = 2048
INCARNATION = "azure_scheduled_events_document_incarnation"


def _families(text: str) -> dict[str, int]:
    """Series per metric family (histogram _bucket/_sum/_count lines counted under the family)."""
    histograms = {
        line.split()[2] for line in text.splitlines() if line.startswith("# TYPE") and line.endswith(" histogram")
    }
    counts: collections.Counter[str] = collections.Counter()
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name = line.split("{", 1)[0].split(" ", 1)[0]
            for suffix in ("_bucket", "_sum", "_count"):
                if name.endswith(suffix) and name[: -len(suffix)] in histograms:
                    name = name[: -len(suffix)]
            counts[name] += 1
    return dict(counts)


def run(mode: Mode) -> Report:
    from se_exporter.simulator import EventPlan

    report = Report(NAME)
    states: dict[str, str] = {}
    with simulator(0) as sim:
        exporter = ExporterProc(sim.url, extra_args=["--vm.name=sim-vm-0"])
        try:
            exporter.wait_ready()
            time.sleep(0.2)
            states["idle"] = exporter.metrics()
            world = sim.world
            event_id = world.add_event(EventPlan(event_type="Freeze", notice=3600.0, duration=9, started_for=3.0))
            incarnation = world.snapshot().incarnation
            states["1 event (Scheduled)"] = wait_until(
                lambda: (t := exporter.metrics()) and (metric_value(t, INCARNATION) or 0) >= incarnation and t,
                10,
                "event visible",
            )
            world.start_event(event_id)
            incarnation = world.snapshot().incarnation
            states["1 event (Started)"] = wait_until(
                lambda: (t := exporter.metrics()) and (metric_value(t, INCARNATION) or 0) >= incarnation and t,
                10,
                "event started",
            )
            wait_until(lambda: not world.snapshot().events, 10, "event completed")
            incarnation = world.snapshot().incarnation
            states["idle after 1 event"] = wait_until(
                lambda: (t := exporter.metrics()) and (metric_value(t, INCARNATION) or 0) >= incarnation and t,
                10,
                "event gone",
            )
        finally:
            exporter.stop()
    rows: list[list[Any]] = []
    data: dict[str, Any] = {"fleet": FLEET, "bytes_per_series": BYTES_PER_SERIES, "states": {}}
    for state, text in states.items():
        series = count_samples(text)
        fleet = series * FLEET
        rows.append([state, series, len(text.encode()), f"{fleet:,}", f"{fleet * BYTES_PER_SERIES / 2**30:.1f}"])
        data["states"][state] = {"series": series, "bytes": len(text.encode()), "families": _families(text)}
    report.table(
        f"Series per VM and for a {FLEET:,}-VM fleet",
        ["state", "series / VM", "scrape bytes", f"series x {FLEET:,}", "Prometheus head GiB (≈2 KiB/series)"],
        rows,
    )
    idle = data["states"]["idle"]["families"]
    rows = [[name, count] for name, count in sorted(idle.items(), key=lambda item: -item[1])]
    report.table("Idle series by family", ["family", "series"], rows)
    return report
