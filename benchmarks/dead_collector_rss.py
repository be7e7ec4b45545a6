"""The dead-collector exporter's resident memory over time: what the footprint table's peak grows with.

One exporter, OTLP export to an endpoint where nothing listens, ``--state.file`` holding ``WAITING`` (1,000)
transition records as an outage leaves them, an idle simulator; its VmRSS and VmHWM every 5 s. Variables
given as ``NAME=VALUE`` are added to its environment, so the same run with ``OTEL_TRACES_EXPORTER=none`` or
a smaller ``OTEL_BSP_MAX_QUEUE_SIZE`` shows which part is the SDK's span queue (it fills while the span
exporter pauses between attempts, up to two minutes). Run several side by side for a comparison in one
window:

    .venv/bin/python -m benchmarks.dead_collector_rss --seconds 400 [NAME=VALUE ...]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from benchmarks.bench_outage import WAITING, dead_endpoint, fill_spool
from benchmarks.common import ExporterProc, proc_status_kib, simulator

EVERY_SECONDS = 5.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=400.0)
    parser.add_argument("--waiting", type=int, default=WAITING)
    parser.add_argument("env", nargs="*", metavar="NAME=VALUE")
    args = parser.parse_args()
    extra = dict(item.split("=", 1) for item in args.env)
    with simulator(0) as sim, tempfile.TemporaryDirectory() as directory:
        state = Path(directory) / "state.db"
        if args.waiting:
            fill_spool(state, args.waiting)
        proc = ExporterProc(sim.url, otel_env=dead_endpoint() | extra, extra_args=[f"--state.file={state}"])
        try:
            proc.wait_ready(60)
            began = time.monotonic()
            print(f"exporter, dead collector, {args.waiting} waiting, {' '.join(args.env) or 'defaults'}")
            print("seconds  VmRSS MiB  VmHWM MiB")
            while (elapsed := time.monotonic() - began) < args.seconds:
                time.sleep(EVERY_SECONDS)
                rss, hwm = (proc_status_kib(proc.pid, field) / 1024 for field in ("VmRSS", "VmHWM"))
                print(f"{elapsed + EVERY_SECONDS:7.0f}  {rss:9.1f}  {hwm:9.1f}", flush=True)
        finally:
            proc.stop()


if __name__ == "__main__":
    main()
