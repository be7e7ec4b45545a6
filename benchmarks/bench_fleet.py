"""Fleet scale: the shipped dashboards and rules over a simulated fleet, in a real Prometheus.

``fleet_series`` writes 6 hours of a fleet's series (2,000 VMs in full mode; idle VMs, a maintenance
wave through the fault domains, live migrations, a Spot eviction burst) as OpenMetrics with the
exporter's real names and labels; ``promtool tsdb create-blocks-from openmetrics`` backfills them;
a real Prometheus serves the blocks. Then every dashboard query runs over the 6 h window (range
queries at a 60 s step, as Grafana asks for a wide panel) and every alerting and recording rule's
expression runs at the end of it, three times each: the median is reported per panel and per rule.

Needs Debian's ``prometheus`` package (``prometheus`` and ``promtool`` on PATH), like the test suite.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import shutil
import statistics
import subprocess
import tempfile
import time
import urllib.parse
from pathlib import Path
from typing import Any

import yaml

from benchmarks import fleet_series
from benchmarks.common import Mode, Report, bound_url, http_get, proc_status_kib
from benchmarks.fleet_series import fleet, write_openmetrics

NAME = "fleet"
SIZES = {"tiny": (20, 1.0), "quick": (500, 6.0), "full": (2000, 6.0)}  # VMs, hours
STEP = 60.0  # seconds between samples: Prometheus's default scrape interval
REPEATS = 3
ONE_VM = "vm-00000:10160"  # in the maintenance wave
RULES = Path(__file__).resolve().parents[1] / "alerts" / "se-exporter.rules.yml"


def run(mode: Mode, vms: int | None = None, cache: Path | None = None) -> Report:
    """``cache``: a folder that keeps the backfilled raw blocks of each fleet size (and their window), so
    that a second run (after a rule or a panel changed) only backfills the rules and queries."""
    count, hours = SIZES[mode.name]
    count = vms or count
    report = Report(NAME)
    promtool, prometheus = shutil.which("promtool"), shutil.which("prometheus")
    if promtool is None or prometheus is None:
        raise RuntimeError("needs prometheus and promtool on PATH (Debian's prometheus package)")
    with tempfile.TemporaryDirectory(prefix="se-fleet-") as folder:
        tmp = Path(folder)
        kept = cache / f"{count}-vms-{hours:g}h-{_series_digest()}" if cache is not None else None
        if kept is not None and (kept / "figures.json").exists():
            figures = json.loads((kept / "figures.json").read_text(encoding="utf-8"))
            shutil.copytree(kept / "data", tmp / "data", copy_function=os.link)  # blocks are never changed in place
            figures["cached"] = str(kept)
        else:
            figures = _backfill_raw(promtool, tmp, count, hours)
            if kept is not None:
                shutil.copytree(tmp / "data", kept / "data", copy_function=os.link)
                (kept / "figures.json").write_text(json.dumps(figures), encoding="utf-8")
        start, end = figures["start"], figures["end"]
        (tmp / "prometheus.yml").write_text("global:\n  scrape_interval: 60s\n  evaluation_interval: 60s\n")
        figures["rules_backfilled"] = _backfill_rules(promtool, prometheus, tmp, start=start, end=end)
        server = _serve(prometheus, tmp)
        try:
            base = bound_url(server)
            panels, rules = _measure(base, hours, start, end)
            figures["series_end"] = _instant(base, 'count({__name__=~".+"})', end)
            figures["prometheus_peak_rss_mib"] = proc_status_kib(server.pid, "VmHWM") / 1024
        finally:
            server.terminate()
            server.wait(30)
    _print(report, figures, panels, rules)
    return report


def _series_digest() -> str:
    """What the cached blocks were made from: a changed fleet_series.py makes new ones."""
    return hashlib.sha256(Path(fleet_series.__file__).read_bytes()).hexdigest()[:12]


def _backfill_raw(promtool: str, tmp: Path, count: int, hours: float) -> dict[str, Any]:
    """The fleet's series for the last ``hours``, generated and backfilled into ``tmp / "data"``."""
    end = math.floor(time.time() / STEP) * STEP - STEP
    start = end - hours * 3600
    figures: dict[str, Any] = {"vms": count, "hours": hours, "start": start, "end": end}
    began = time.monotonic()
    with (tmp / "fleet.om").open("w") as out:
        figures["samples"] = write_openmetrics(out, fleet(count, start, hours), start, end, STEP)
    figures["generated"] = time.monotonic() - began
    figures["text_bytes"] = (tmp / "fleet.om").stat().st_size
    began = time.monotonic()
    subprocess.run(
        [promtool, "tsdb", "create-blocks-from", "openmetrics", str(tmp / "fleet.om"), str(tmp / "data")],
        check=True,
        capture_output=True,
    )
    figures["backfilled"] = time.monotonic() - began
    (tmp / "fleet.om").unlink()
    figures["blocks"] = _blocks(tmp / "data")
    return figures


def _backfill_rules(promtool: str, prometheus: str, tmp: Path, *, start: float, end: float) -> float:
    """The recording rules the fleet overview reads, backfilled over the window as Prometheus would have
    recorded them: promtool evaluates them against a server on the raw blocks, then writes blocks."""
    server = _serve(prometheus, tmp)
    try:
        base = bound_url(server)
        _wait_ready(base)
        began = time.monotonic()
        subprocess.run(
            [
                promtool,
                "tsdb",
                "create-blocks-from",
                "rules",
                f"--start={start:.0f}",
                f"--end={end:.0f}",
                f"--url={base}",
                "--eval-interval=60s",
                f"--output-dir={tmp / 'recorded'}",
                str(RULES),
            ],
            check=True,
            capture_output=True,
        )
        took = time.monotonic() - began
    finally:
        server.terminate()
        server.wait(30)
    for block in (tmp / "recorded").iterdir():
        block.rename(tmp / "data" / block.name)
    return took


Panel = tuple[str, str, str, bool, tuple[float, int]]
Rule = tuple[str, str, tuple[float, int]]


def _measure(base: str, hours: float, start: float, end: float) -> tuple[list[Panel], list[Rule]]:
    from tests.rules.dashboard_queries import dashboard_queries

    _wait_ready(base)
    window = functools.partial(
        dashboard_queries, rate_interval="4m", interval=f"{STEP:.0f}s", range_=f"{hours:g}h", include_variables=False
    )
    # The fleet overview with every VM selected; the VM detail, as its name says, for one VM.
    queries = [q for q in window() if "fleet" in q.dashboard_file]
    queries += [q for q in window(instance=ONE_VM) if "fleet" not in q.dashboard_file]
    panels = [
        (q.dashboard_file, q.panel_title, q.ref_id, q.instant, _timed(base, q.expr, start, end, q.instant))
        for q in queries
    ]
    rules = [(name, kind, _timed(base, expr, start, end, True)) for name, kind, expr in _rules()]
    return panels, rules


def _serve(prometheus: str, tmp: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            prometheus,
            f"--config.file={tmp / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp / 'data'}",
            "--web.listen-address=127.0.0.1:0",
            "--storage.tsdb.retention.time=30d",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _blocks(data: Path) -> dict[str, float]:
    stats = [json.loads(meta.read_text(encoding="utf-8"))["stats"] for meta in data.glob("*/meta.json")]
    size = sum(f.stat().st_size for f in data.rglob("*") if f.is_file())
    samples = sum(s["numSamples"] for s in stats)
    return {
        "blocks": len(stats),
        "series": max((s["numSeries"] for s in stats), default=0),
        "samples": samples,
        "bytes": size,
        "bytes_per_sample": size / samples if samples else 0.0,
    }


def _wait_ready(base: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if http_get(base + "/-/ready")[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError("Prometheus did not become ready")


def _query(base: str, expr: str, start: float, end: float, instant: bool) -> dict[str, Any]:
    if instant:
        params = {"query": expr, "time": f"{end:.0f}"}
        path = "/api/v1/query"
    else:
        params = {"query": expr, "start": f"{start:.0f}", "end": f"{end:.0f}", "step": f"{STEP:.0f}"}
        path = "/api/v1/query_range"
    status, body = http_get(f"{base}{path}?{urllib.parse.urlencode(params)}", timeout=120)
    answer: dict[str, Any] = json.loads(body)
    if status != 200 or answer.get("status") != "success":
        raise RuntimeError(f"query failed ({status}): {expr}: {body[:300]!r}")
    return answer


def _timed(base: str, expr: str, start: float, end: float, instant: bool) -> tuple[float, int]:
    """(median seconds over REPEATS, series in the answer)."""
    times, answer = [], {}
    for _ in range(REPEATS):
        began = time.perf_counter()
        answer = _query(base, expr, start, end, instant)
        times.append(time.perf_counter() - began)
    return statistics.median(times), len(answer["data"]["result"])


def _instant(base: str, expr: str, at: float) -> int:
    result = _query(base, expr, at, at, True)["data"]["result"]
    return int(float(result[0]["value"][1])) if result else 0


def _rules() -> list[tuple[str, str, str]]:
    groups = yaml.safe_load(RULES.read_text(encoding="utf-8"))["groups"]
    return [
        (rule.get("alert") or rule["record"], "alert" if "alert" in rule else "record", rule["expr"])
        for group in groups
        for rule in group["rules"]
    ]


def _print(report: Report, figures: dict[str, Any], panels: list[Panel], rules: list[Rule]) -> None:
    slowest = max((seconds for *_, (seconds, _) in panels), default=0.0)
    count, hours, blocks = figures["vms"], figures["hours"], figures["blocks"]
    report.table(
        f"Fleet of {count:,} VMs, {hours:g} h at a {STEP:.0f} s interval, in a real Prometheus",
        ["figure", "value"],
        [
            ["samples backfilled", f"{figures['samples']:,}"],
            ["OpenMetrics text", f"{figures['text_bytes'] / 2**20:,.0f} MiB"],
            [
                "generated in / backfilled in (promtool)",
                f"{figures['generated']:.0f} s / {figures['backfilled']:.0f} s",
            ],
            ["recording rules backfilled in (promtool)", f"{figures['rules_backfilled']:.0f} s"],
            [
                "raw blocks",
                f"kept from an earlier run in {figures['cached']}" if "cached" in figures else "made by this run",
            ],
            ["series in the blocks", f"{blocks['series']:,.0f}"],
            ["series at the end of the window", f"{figures['series_end']:,}"],
            ["blocks on disk", f"{blocks['bytes'] / 2**20:,.1f} MiB in {blocks['blocks']:.0f} block(s)"],
            ["bytes per sample on disk", f"{blocks['bytes_per_sample']:.2f}"],
            ["Prometheus peak RSS after the queries", f"{figures['prometheus_peak_rss_mib']:,.0f} MiB"],
            ["slowest dashboard query (median of 3)", f"{slowest * 1000:,.0f} ms"],
        ],
    )
    print_queries(report, figures, panels, rules)


def print_queries(report: Report, figures: dict[str, Any], panels: list[Panel], rules: list[Rule]) -> None:
    """The two tables of timed queries and rules, and the report's data (both benchmarks)."""
    hours = figures["hours"]
    slowest = max((seconds for *_, (seconds, _) in panels), default=0.0)
    report.table(
        f"Every dashboard query over {hours:g} h ({len(panels)} queries, slowest first; median of 3)",
        ["dashboard", "panel", "ref", "kind", "ms", "series"],
        [
            [file.removesuffix(".json"), title, ref, "instant" if instant else "range", f"{seconds * 1000:.0f}", n]
            for file, title, ref, instant, (seconds, n) in sorted(panels, key=lambda p: -p[4][0])
        ],
    )
    report.table(
        f"Every rule's expression at the end of the window ({len(rules)} rules; median of 3)",
        ["rule", "kind", "ms", "series"],
        [
            [name, kind, f"{seconds * 1000:.0f}", n]
            for name, kind, (seconds, n) in sorted(rules, key=lambda r: -r[2][0])
        ],
    )
    report.data.update(
        {
            **figures,
            "slowest_panel_seconds": slowest,
            "panels": [
                {"dashboard": f, "panel": t, "ref": r, "instant": i, "seconds": s, "series": n}
                for f, t, r, i, (s, n) in panels
            ],
            "rules": [{"rule": name, "kind": kind, "seconds": s, "series": n} for name, kind, (s, n) in rules],
        }
    )
