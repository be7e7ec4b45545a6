"""``python -m benchmarks [--quick|--tiny] [--only NAME ...] [--duration S]``: run the benchmarks.

Each benchmark prints Markdown tables and writes its figures as JSON to ``benchmarks/results/``.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.common import Mode, Report, machine_info, write_results

BENCHMARKS = {
    "footprint": "benchmarks.bench_footprint",  # CPU % and peak RSS vs the reference loop
    "heap": "benchmarks.heap_map",  # the Python heap by package: start, idle, 1,000 events
    "outage": "benchmarks.bench_outage",  # idle CPU with a dead collector and 1,000 records waiting
    "onset": "benchmarks.bench_onset",  # CPU in the first minute of an outage, 300 records waiting
    "poll": "benchmarks.bench_poll",  # cost per poll, fetch excluded
    "actions": "benchmarks.bench_actions",  # poll latency and CPU with actions configured vs not
    "metrics": "benchmarks.bench_metrics",  # /metrics latency
    "scrape": "benchmarks.bench_scrape",  # /metrics as Prometheus scrapes: over HTTP, each a fresh render
    "detection": "benchmarks.bench_detection",  # IMDS change → /metrics, → transition log
    "startup": "benchmarks.bench_startup",  # spawn → ready, import time
    "writes": "benchmarks.bench_writes",  # disk writes of the state file: 1,000 events, one change a second
    "series": "benchmarks.bench_series",  # series per VM, fleet cost
    "fleet": "benchmarks.bench_fleet",  # the dashboards and rules over a simulated fleet in Prometheus
    "fleet_engine": "benchmarks.bench_fleet_engine",  # the same fleet through remote_write to VictoriaMetrics
}
OPT_IN = frozenset({"fleet_engine"})  # run only when named: it needs Debian's victoria-metrics


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.splitlines()[0])
    speed = parser.add_mutually_exclusive_group()
    speed.add_argument("--quick", action="store_true", help="short runs (~10 s windows), for a first look")
    speed.add_argument("--tiny", action="store_true", help="a few seconds in all: checks the benchmarks start")
    parser.add_argument(
        "--only",
        action="append",
        choices=sorted(BENCHMARKS),
        metavar="NAME",
        help=f"run only this benchmark (repeatable): {', '.join(BENCHMARKS)}",
    )
    parser.add_argument(
        "--duration",
        type=float,
        default=None,
        help="measuring window in seconds of footprint (default 120, --quick 15) and outage (default 600, --quick 60)",
    )
    parser.add_argument("--vms", type=int, default=None, help="fleet: simulated VMs (default 2,000, --quick 500)")
    parser.add_argument(
        "--fleet-cache",
        type=Path,
        default=None,
        help="fleet: keep (and reuse) the backfilled raw blocks in this folder",
    )
    parser.add_argument("--no-save", action="store_true", help="do not write JSON results")
    args = parser.parse_args(argv)
    mode = Mode("quick" if args.quick else "tiny" if args.tiny else "full")
    machine = machine_info()
    print(f"# se-exporter benchmarks ({mode.name})\n")
    print(
        f"machine: {machine['nproc']} x {machine['cpu_model']}, {machine['mem_gib']} GiB, "
        f"{machine['implementation']} {machine['python']}, Linux {machine['kernel']}\n",
        flush=True,
    )
    failed = []
    for name in args.only or [name for name in BENCHMARKS if name not in OPT_IN]:
        module = importlib.import_module(BENCHMARKS[name])
        print(f"## {name}\n", flush=True)
        began = time.monotonic()
        try:
            report = _run(module, name, mode, args)
        except Exception as error:  # one broken benchmark must not hide the others
            print(f"error: benchmark {name} failed: {type(error).__name__}: {error}\n", flush=True)
            failed.append(name)
            continue
        if not args.no_save:
            path = write_results(report, mode)
            print(
                f"({name}: {time.monotonic() - began:.1f} s, results in {path.relative_to(path.parents[2])})\n",
                flush=True,
            )
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


def _run(module: Any, name: str, mode: Mode, args: argparse.Namespace) -> Report:
    options: dict[str, Any] = {}
    if name in ("footprint", "outage"):
        options = {"duration": args.duration}
    elif name == "fleet":
        options = {"vms": args.vms, "cache": args.fleet_cache}
    elif name == "fleet_engine":
        options = {"vms": args.vms}
    report: Report = module.run(mode, **options)
    return report


if __name__ == "__main__":
    sys.exit(main())
