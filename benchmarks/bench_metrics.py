"""/metrics latency p50/p99 with 0, 10, 100 and 1000 events listed.

- ``render``: in-process, the ``Exporter``'s registry written by prometheus_client's ``generate_latest``
  (the collectors and the text writer; no HTTP), the store filled by one poll of the real IMDS client fed the body;
  side by side (alternating) with ``generate_latest`` on a **plain prometheus_client registry holding
  the same series** (Gauge and Counter objects with the same names, labels and values: what an
  exporter written the usual way would serve), and the ratio of the two medians.
- ``HTTP``: a real exporter process polling a simulator process (1 s), scraped over loopback by the driver
  with a fresh connection per scrape, with Prometheus's headers (OpenMetrics offered first, gzip; the
  exporter answers the text format, as node_exporter does) and with curl's (``*/*``: text 0.0.4, no
  compression) and with ``Accept: text/plain;version=0.0.4``. Latency is request sent → last byte read.
  Side by side (alternating), a **plain prometheus_client exporter process**
  (``benchmarks/plain_server.py``: ``start_http_server`` over a registry holding the same series) is
  scraped with the same headers, and the ratio of the two medians is reported.
"""

from __future__ import annotations

import gzip
import http.client
import logging
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from benchmarks.bench_poll import make_body
from benchmarks.common import (
    ExporterProc,
    FedClient,
    Mode,
    Proc,
    Report,
    ScrapedProc,
    clean_env,
    count_samples,
    percentile,
    refusing_port,
    simulator_process,
    wait_until,
)

if TYPE_CHECKING:
    from se_exporter.imds.client import IMDSClient

NAME = "metrics"
SIZES = (0, 10, 100, 1000)
PROMETHEUS_HEADERS = {
    "Accept": "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
    "text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
    "Accept-Encoding": "gzip",
}
CURL_HEADERS = {"Accept": "*/*"}
TEXT_HEADERS = {"Accept": "text/plain;version=0.0.4"}


def plain_registry(text: str) -> Any:
    """A prometheus_client registry of plain Gauges and Counters holding the series of ``text``."""
    from prometheus_client import CollectorRegistry, Counter, Gauge, disable_created_metrics
    from prometheus_client.parser import text_string_to_metric_families

    disable_created_metrics()  # the same series exactly: the exporter renders no _created either
    registry = CollectorRegistry()
    for family in text_string_to_metric_families(text):
        by_name: dict[str, list[Any]] = {}
        for sample in family.samples:
            by_name.setdefault(sample.name, []).append(sample)
        for name, samples in by_name.items():
            labelnames = sorted(samples[0].labels)
            if family.type == "counter" and name.endswith("_total"):
                metric: Any = Counter(name.removesuffix("_total"), family.documentation, labelnames, registry=registry)
                for sample in samples:
                    (metric.labels(**sample.labels) if labelnames else metric).inc(sample.value)
            else:
                metric = Gauge(name, family.documentation, labelnames, registry=registry)
                for sample in samples:
                    (metric.labels(**sample.labels) if labelnames else metric).set(sample.value)
    return registry


def _render_samples(size: int, repeats: int) -> tuple[list[float], list[float], int, int]:
    from prometheus_client import generate_latest

    from se_exporter.app import Exporter
    from se_exporter.config.options import ExporterConfig

    body = make_body(size, 1)
    quiet = logging.getLogger("se_exporter")  # the in-process exporter's transition lines: not wanted here
    quiet.handlers[:] = [logging.NullHandler()]
    quiet.propagate = False

    imds = f"http://127.0.0.1:{refusing_port()}"  # nothing answers: the poller's client is fed the body
    config = ExporterConfig(listen_host="127.0.0.1", listen_port=0, imds_url=imds, vm_name="vm-self")
    exporter = Exporter(config)
    exporter.start()  # close() shuts the web server down, which waits for it to have started
    try:
        fed = FedClient(exporter.poller.client)
        fed.body = body
        exporter.poller.client = cast("IMDSClient", fed)
        if exporter.poller.poll_once() is not None:
            raise RuntimeError("the in-process poll failed")
        text = generate_latest(exporter.registry)
        plain = plain_registry(text.decode())
        samples, reference = [], []
        for _ in range(repeats):  # A B A B: the same moments of a noisy machine for both
            began = time.perf_counter()
            generate_latest(exporter.registry)
            samples.append((time.perf_counter() - began) * 1000)
            began = time.perf_counter()
            generate_latest(plain)
            reference.append((time.perf_counter() - began) * 1000)
        return samples, reference, count_samples(text.decode()), len(text)
    finally:
        exporter.close()


def _scrape(port: int, headers: dict[str, str]) -> tuple[float, bytes]:
    began = time.perf_counter()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        connection.request("GET", "/metrics", headers=headers)
        response = connection.getresponse()
        body = response.read()
        if response.status != 200:
            raise RuntimeError(f"/metrics answered {response.status}")
    finally:
        connection.close()
    return (time.perf_counter() - began) * 1000, body


def _plain_server(exposition: str, directory: Path) -> tuple[Proc, int]:
    """The same series served the usual way: prometheus_client's start_http_server, in its own process."""
    path = directory / "exposition.prom"
    path.write_text(exposition, encoding="utf-8")
    server = ScrapedProc([sys.executable, "-m", "benchmarks.plain_server", str(path)], env=clean_env(), name="plain")
    return server, server.port


def _http_samples(size: int, repeats: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with simulator_process(size, seed=size) as url, tempfile.TemporaryDirectory(prefix="se-bench-metrics-") as tmp:
        exporter = ExporterProc(url, extra_args=["--vm.name=sim-vm-0"], name=f"exporter-{size}")
        plain: Proc | None = None
        try:
            exporter.wait_ready()
            wait_until(
                lambda: "azure_scheduled_events_event_info{" in exporter.metrics() or size == 0, 10, "events visible"
            )
            plain, plain_port = _plain_server(exporter.metrics(), Path(tmp))
            for label, headers in (
                ("Prometheus headers (text, gzip)", PROMETHEUS_HEADERS),
                ("curl (text 0.0.4)", CURL_HEADERS),
                ("Accept: text/plain;version=0.0.4", TEXT_HEADERS),
            ):
                for _ in range(3):
                    _scrape(exporter.port, headers)  # warm
                    _scrape(plain_port, headers)
                samples, reference, size_bytes = [], [], 0
                for _ in range(repeats):  # A B A B: the same moments of a noisy machine for both
                    ms, body = _scrape(exporter.port, headers)
                    samples.append(ms)
                    size_bytes = len(body)
                    reference.append(_scrape(plain_port, headers)[0])
                    time.sleep(0.002)  # leave the poll loop its share, as a 15 s scrape interval would
                text = gzip.decompress(body) if "gzip" in headers.get("Accept-Encoding", "") else body
                out[label] = {
                    "samples": samples,
                    "plain_samples": reference,
                    "bytes": size_bytes,
                    "series": count_samples(text.decode()),
                }
        finally:
            exporter.stop()
            if plain is not None:
                plain.stop()
    return out


def run(mode: Mode) -> Report:
    report = Report(NAME)
    render_repeats = mode.pick(1000, 300, 20)
    http_repeats = mode.pick(500, 150, 10)
    sizes = SIZES if mode.name != "tiny" else (0, 10)
    rows: list[list[Any]] = []
    data: dict[str, Any] = {"unit": "milliseconds", "cells": []}
    plain_rows: list[list[Any]] = []
    for size in sizes:
        samples, reference, series, length = _render_samples(size, render_repeats)
        rows.append(["render (in-process)", size, percentile(samples, 50), percentile(samples, 99), series, length])
        data["cells"].append(
            {
                "how": "render",
                "events": size,
                "p50_ms": percentile(samples, 50),
                "p99_ms": percentile(samples, 99),
                "series": series,
                "bytes": length,
                "plain_p50_ms": percentile(reference, 50),
                "plain_p99_ms": percentile(reference, 99),
            }
        )
        plain_rows.append(
            [
                size,
                series,
                percentile(samples, 50),
                percentile(reference, 50),
                f"{percentile(samples, 50) / percentile(reference, 50):.2f}x",
            ]
        )
    report.table(
        "/metrics render vs a plain prometheus_client registry with the same series (ms, p50)",
        ["events", "series", "se-exporter", "plain prometheus_client", "ratio"],
        plain_rows,
    )
    http_plain_rows: list[list[Any]] = []
    for size in sizes:
        for label, cell in _http_samples(size, http_repeats).items():
            p50, p99 = percentile(cell["samples"], 50), percentile(cell["samples"], 99)
            plain_p50 = percentile(cell["plain_samples"], 50)
            rows.append([f"HTTP, {label}", size, p50, p99, cell["series"], cell["bytes"]])
            http_plain_rows.append([label, size, p50, plain_p50, f"{p50 / plain_p50:.2f}x"])
            data["cells"].append(
                {
                    "how": f"HTTP {label}",
                    "events": size,
                    "p50_ms": p50,
                    "p99_ms": p99,
                    "series": cell["series"],
                    "bytes": cell["bytes"],
                    "plain_p50_ms": plain_p50,
                    "plain_p99_ms": percentile(cell["plain_samples"], 99),
                }
            )
    report.table(
        "/metrics over HTTP vs a plain prometheus_client server with the same series (ms, p50)",
        ["headers", "events", "se-exporter", "plain prometheus_client", "ratio"],
        http_plain_rows,
    )
    report.table("/metrics latency (ms)", ["how", "events", "p50 ms", "p99 ms", "series", "bytes"], rows)
    report.data = data
    return report
