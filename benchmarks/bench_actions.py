"""Poll latency and CPU with actions configured vs not (``--actions.config``), in-process.

The real ``Exporter`` wiring of bench_poll (a state file, every sink, the poller fed by a stub client), once
without actions and once with one action that runs ``true`` for every ``scheduled`` transition, alternated
(A B A B) in ``rounds`` rounds. ``one change`` is a document with one event replaced (one run queued);
``all new`` lists every event first seen (a run each). A poll with actions also saves the state twice (the
runs, then "may have started") and starts up to twice ``concurrency`` commands in the background, which
compete with the next poll for the CPU. CPU per poll is the process's and its reaped children's CPU time
(the commands) over the measured polls, divided by their number.
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.bench_poll import make_body, wired_exporter
from benchmarks.common import Mode, Report, percentile

NAME = "actions"
ACTIONS = "concurrency: 4\nactions:\n  - name: bench\n    transitions: [scheduled]\n    command: [{true}]\n"


def _cpu() -> float:
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


def _cell(exporter: Any, size: int, case: str, polls: int) -> tuple[list[float], float]:
    """Poll latencies (ms) and CPU per poll (ms) of ``polls`` measured polls."""
    poller, client = exporter.poller, exporter.poller.client
    samples: list[float] = []
    cpu = 0.0
    for index in range(polls):
        if case == "all new":
            client.body = make_body(0, 2 * index + 10)  # untimed: every event removed (cancelled: no run)
        else:
            client.body = make_body(size, 2 * index + 10, variant=index % 2)
        poller.poll_once()
        client.body = make_body(size, 2 * index + 11, variant=(index + 1) % 2)
        began_cpu, began = _cpu(), time.perf_counter()
        poller.poll_once()
        samples.append((time.perf_counter() - began) * 1000)
        cpu += _cpu() - began_cpu
    return samples, 1000 * cpu / polls


def run(mode: Mode) -> Report:
    report = Report(NAME)
    rounds, polls = mode.pick(3, 2, 1), mode.pick(200, 60, 5)
    sizes = mode.pick((10, 100), (10, 100), (10,))
    true = shutil.which("true") or "/bin/true"
    cells: dict[tuple[str, int, str], list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="se-bench-actions-") as tmp:
        config = Path(tmp) / "actions.yaml"
        config.write_text(ACTIONS.format(true=true))
        for round_ in range(rounds):
            for variant in ("no actions", "actions"):
                options: dict[str, Any] = {"state_file": Path(tmp) / f"state-{variant[:2]}-{round_}.json"}
                if variant == "actions":
                    options["actions_config"] = config
                with wired_exporter(**options) as exporter:
                    for size in sizes:
                        for case in ("one change", "all new"):
                            # all new queues a run per event: a tenth of the polls keeps the queue far
                            # under its bound (10,000 runs), where runs would be skipped, not run
                            count = polls if case == "one change" else max(2, polls // 10)
                            samples, cpu = _cell(exporter, size, case, count)
                            cells.setdefault((variant, size, case), []).append((percentile(samples, 50), cpu))
    rows = []
    for (variant, size, case), runs in sorted(cells.items(), key=lambda item: (item[0][1], item[0][2], item[0][0])):
        p50s, cpus = [r[0] for r in runs], [r[1] for r in runs]
        rows.append([variant, size, case, _median_spread(p50s), _median_spread(cpus)])
    report.table(
        f"Poll with and without actions ({rounds} rounds of {polls} polls, median (min-max) of the rounds)",
        ["", "events", "case", "poll p50 ms", "CPU ms per poll"],
        rows,
    )
    report.data = {"rounds": rounds, "polls": polls, "cells": {"/".join(map(str, k)): v for k, v in cells.items()}}
    return report


def _median_spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"
