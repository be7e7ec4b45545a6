"""/metrics as Prometheus scrapes it: over HTTP, end to end, every scrape on a fresh render.

A real exporter process polls a simulator process at 1 s (the default) with 100 and then 1,000 events
listed. Beside it, in the same window, a plain prometheus_client process (``benchmarks/plain_server.py``:
Gauges and Counters holding the same series, built once, rendered by ``start_http_server`` at every
scrape) serves the same families. The driver scrapes both with Prometheus's headers (OpenMetrics offered
first, gzip: client_python then answers OpenMetrics, se-exporter the text format, as node_exporter does)
with the text format asked for (gzip too: the same format from both), and as curl asks (text, no gzip),
a fresh connection each,
alternately, each server at most once every ``GAP_SECONDS``: longer
than the exporter shares a finished render (``web/renders.py``'s ``SHARE_SECONDS``), so every scrape of
ours renders afresh, as every scrape of a Prometheus does (15 s apart). A scrape's time runs from the
request sent to the last byte read. Reported: p50 and p99 of each, and the ratios.

Nothing here is derived by adding parts measured apart: both columns are the same measurement.
"""

from __future__ import annotations

import gzip
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.bench_metrics import PROMETHEUS_HEADERS, _plain_server, _scrape
from benchmarks.common import ExporterProc, Mode, Proc, Report, count_samples, percentile, simulator_process, wait_until

NAME = "scrape"
SIZES = (100, 1000)
GAP_SECONDS = 1.25  # > SHARE_SECONDS (1.0): the exporter's last render is never reused
HEADERS = {
    "Prometheus's": PROMETHEUS_HEADERS,
    "text 0.0.4, gzip": {"Accept": "text/plain;version=0.0.4", "Accept-Encoding": "gzip"},
    "curl's (text 0.0.4, no gzip)": {"Accept": "*/*"},
}


def _window(size: int, scrapes: int) -> dict[str, dict[str, Any]]:
    cells: dict[str, dict[str, Any]] = {}
    with simulator_process(size, seed=size) as url, tempfile.TemporaryDirectory(prefix="se-bench-scrape-") as tmp:
        exporter = ExporterProc(url, extra_args=["--vm.name=sim-vm-0"], name=f"exporter-{size}")
        plain: Proc | None = None
        try:
            exporter.wait_ready()
            wait_until(lambda: exporter.metrics().count("azure_scheduled_events_event_info{") >= size, 30, "events")
            plain, plain_port = _plain_server(exporter.metrics(), Path(tmp))
            for label, headers in HEADERS.items():
                ours: list[float] = []
                theirs: list[float] = []
                body = b""
                for index in range(scrapes + 2):  # the first two warm both up
                    began = time.monotonic()
                    ms, body = _scrape(exporter.port, headers)
                    plain_ms, _ = _scrape(plain_port, headers)
                    if index >= 2:
                        ours.append(ms)
                        theirs.append(plain_ms)
                    time.sleep(max(0.0, GAP_SECONDS - (time.monotonic() - began)))
                cells[label] = {
                    "samples": ours,
                    "plain_samples": theirs,
                    "bytes": len(body),
                    "series": count_samples((gzip.decompress(body) if "Accept-Encoding" in headers else body).decode()),
                }
            return cells
        finally:
            exporter.stop()
            if plain is not None:
                plain.stop()


def run(mode: Mode) -> Report:
    report = Report(NAME)
    scrapes = mode.pick(60, 30, 3)
    sizes = SIZES if mode.name != "tiny" else (10,)
    rows: list[list[Any]] = []
    cells: list[dict[str, Any]] = []
    for size in sizes:
        for label, cell in _window(size, scrapes).items():
            ours, theirs = cell["samples"], cell["plain_samples"]
            p50, p99 = percentile(ours, 50), percentile(ours, 99)
            plain_p50, plain_p99 = percentile(theirs, 50), percentile(theirs, 99)
            rows.append(
                [
                    size,
                    label,
                    cell["series"],
                    len(ours),
                    f"{p50:.1f} / {p99:.1f}",
                    f"{plain_p50:.1f} / {plain_p99:.1f}",
                    f"{p50 / plain_p50:.2f}x / {p99 / plain_p99:.2f}x",
                ]
            )
            cells.append({"events": size, "headers": label, **cell, "p50_ms": p50, "p99_ms": p99})
    report.table(
        f"/metrics over HTTP, every scrape a fresh render ({GAP_SECONDS} s apart), Prometheus's headers, "
        "exporter polling at 1 s (ms, p50 / p99)",
        ["events", "headers", "series", "scrapes", "se-exporter", "plain prometheus_client", "ratio"],
        rows,
    )
    report.data = {"unit": "milliseconds", "cells": cells}
    return report
