"""Where the memory goes, by package, at start, idle and after 1,000 events, OTel off and on (issue 46).

The exporter runs as it always does (``se_exporter.cli.main``), in a child interpreter that traces its Python
allocations (``tracemalloc``, one frame) and, at each SIGUSR1, writes what is held, grouped by the package
of the line that allocated it (``se_exporter.lifecycle``, ``prometheus_client``, ``opentelemetry.sdk``,
``json``…), with its VmRSS. What tracemalloc cannot see (C libraries' own memory: OpenSSL, protobuf's
upb arena, glibc's free lists) is the gap between RSS and the traced total. A map, not a ledger:
allocations are charged to the innermost Python line, so a document decoded by msgspec for the store is
charged to ``msgspec``'s caller.

    .venv/bin/python -m benchmarks --only heap
"""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
import time
import tracemalloc
from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks.common import (
    Mode,
    Report,
    ScrapedProc,
    add_events,
    clean_env,
    http_get,
    otel_env,
    otlp_receiver,
    simulator,
    wait_until,
)

NAME = "heap"
MOMENTS = ("start", "idle", "1,000 events")
EVENTS = 1000


def package(filename: str) -> str:
    """``se_exporter.lifecycle`` for se_exporter/store/events.py, ``httpx`` for …/site-packages/httpx/…"""
    path = Path(filename)
    parts = path.parts
    if "se_exporter" in parts:
        inner = parts[parts.index("se_exporter") + 1 :]
        return "se_exporter." + inner[0].removesuffix(".py") if len(inner) > 1 else "se_exporter"
    if "site-packages" in parts:
        inner = parts[parts.index("site-packages") + 1 :]
        top = inner[0].removesuffix(".py")
        if top in ("opentelemetry", "google") and len(inner) > 2:
            return f"{top}.{inner[1]}"
        return top
    if filename.startswith("<frozen"):
        return "importlib (frozen)"
    return parts[-2] if parts[-1] == "__init__.py" else path.stem  # the standard library's module


def _child(out: str, argv: list[str]) -> int:
    """In the child: trace, dump at each SIGUSR1, run the exporter."""
    tracemalloc.start(1)

    def dump(_signum: int, _frame: Any) -> None:
        held: Counter[str] = Counter()
        for stat in tracemalloc.take_snapshot().statistics("filename"):
            held[package(str(stat.traceback[0].filename))] += stat.size
        with open("/proc/self/status", encoding="utf-8") as status:
            rss = next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
        record = {
            "rss_kib": rss,
            "traced_kib": sum(held.values()) // 1024,
            "kib": {k: v // 1024 for k, v in held.items()},
        }
        with open(out, "a", encoding="utf-8") as file:
            file.write(json.dumps(record) + "\n")

    signal.signal(signal.SIGUSR1, dump)
    from se_exporter.cli import main

    return main(argv)


class TracedExporter(ScrapedProc):
    """The exporter, with its usual flags, run by the tracing child."""

    def __init__(self, imds_url: str, out: Path, env: dict[str, str] | None, name: str) -> None:
        flags = ["--web.listen-address=127.0.0.1:0", f"--imds.url={imds_url}", "--vm.name=vm-0"]
        argv = [sys.executable, "-m", "benchmarks.heap_map", str(out), "run", *flags]
        super().__init__(argv, env=clean_env(env, otel=env is not None), name=name)

    def wait_ready(self) -> None:
        wait_until(lambda: self.alive() and http_get(self.url + "/-/ready", timeout=1)[0] == 200, 60, "ready")


def _moments(exporter: TracedExporter, out: Path, world: Any, idle: float) -> list[dict[str, Any]]:
    def dumped(count: int) -> bool:
        return out.exists() and len(out.read_text(encoding="utf-8").splitlines()) >= count

    def dump(count: int) -> None:
        exporter.metrics()  # as Prometheus would have, just before
        os.kill(exporter.pid, signal.SIGUSR1)
        wait_until(lambda: dumped(count), 60, f"map {count}")

    exporter.wait_ready()
    dump(1)
    time.sleep(idle)  # polls and scrapes, nothing listed
    dump(2)
    add_events(world, EVENTS)
    wait_until(lambda: exporter.metrics().count("azure_scheduled_events_event_info{") >= EVENTS, 60, "events listed")
    time.sleep(idle / 2)
    dump(3)
    return [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]


def run(mode: Mode) -> Report:
    report = Report(NAME)
    idle = mode.pick(30.0, 10.0, 3.0)
    maps: dict[str, list[dict[str, Any]]] = {}
    with otlp_receiver() as receiver:
        configurations = {"OTel off": None, **({"OTel on": otel_env(receiver)} if receiver else {})}
        for label, env in configurations.items():
            with simulator() as sim, tempfile.TemporaryDirectory() as folder:
                out = Path(folder) / "heap.jsonl"
                exporter = TracedExporter(sim.url, out, env, label)
                try:
                    maps[label] = _moments(exporter, out, sim.world, idle)
                finally:
                    exporter.stop()
    _report(maps, report)
    report.data["maps"] = maps
    return report


def _report(maps: dict[str, list[dict[str, Any]]], report: Report) -> None:
    for label, moments in maps.items():
        packages = Counter[str]()
        for moment in moments:
            packages.update(moment["kib"])
        top = [name for name, _ in packages.most_common(14)]
        rows = [[name, *(moment["kib"].get(name, 0) for moment in moments)] for name in top]
        rows.append(["traced in all", *(moment["traced_kib"] for moment in moments)])
        rows.append(["VmRSS", *(moment["rss_kib"] for moment in moments)])
        report.table(f"Python heap by package, KiB ({label})", ["package", *MOMENTS[: len(moments)]], rows)


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1], sys.argv[2:]))
