"""Start-up time to ready and import time.

- ``spawn → /-/ready 200``: a fresh ``python -m se_exporter run`` against an in-process simulator
  (the first poll includes learning the VM name from compute metadata), probed every 5 ms; the
  reference loop's spawn → first document printed, side by side.
- memory at import: resident memory after se_exporter.app's imports and after the reference loop's, each in a
  fresh interpreter, and what each of se_exporter's own imports adds (``benchmarks/import_memory.py``).
- import time: wall time of ``python -c 'import X'`` minus ``python -c pass``, and the sum of the
  top-level cumulative times of ``python -X importtime -c 'import se_exporter.cli'``, with the
  heaviest top-level imports.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from typing import Any

from benchmarks.common import (
    REPO,
    ExporterProc,
    Mode,
    ReferenceProc,
    Report,
    clean_env,
    otel_env,
    otlp_receiver,
    percentile,
    simulator,
)

NAME = "startup"
_IMPORTTIME = re.compile(r"^import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)")


def _wall(code: str) -> float:
    began = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], env=clean_env(), check=True)
    return time.perf_counter() - began


def importtime(module: str) -> tuple[float, list[tuple[str, float]], int]:
    """(total ms, top-level imports by cumulative ms, number of modules) of importing ``module``."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", f"import {module}, sys; print(len(sys.modules))"],
        env=clean_env(),
        capture_output=True,
        text=True,
        check=True,
    )
    top: list[tuple[str, float]] = []
    for line in done.stderr.splitlines():
        match = _IMPORTTIME.match(line)
        if match and len(match.group(3)) == 1:  # one space: imported by the script itself (top level)
            top.append((match.group(4), int(match.group(2)) / 1000))
    return sum(ms for _, ms in top), sorted(top, key=lambda item: -item[1]), int(done.stdout.strip())


def nested_imports(module: str, limit: int = 12) -> list[tuple[str, float]]:
    """The heaviest imports anywhere in the tree (cumulative ms), for finding lazy-import candidates."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", f"import {module}"],
        env=clean_env(),
        capture_output=True,
        text=True,
        check=True,
    )
    rows = []
    for line in done.stderr.splitlines():
        match = _IMPORTTIME.match(line)
        if (match and "." not in match.group(4)) or (match and match.group(4).startswith("se_exporter")):
            rows.append((match.group(4), int(match.group(2)) / 1000))
    seen: dict[str, float] = {}
    for name, ms in rows:
        seen[name] = max(ms, seen.get(name, 0.0))
    return sorted(seen.items(), key=lambda item: -item[1])[:limit]


def run(mode: Mode) -> Report:
    report = Report(NAME)
    repeats = mode.pick(10, 4, 1)
    ready: dict[str, list[float]] = {
        "exporter, OTel off": [],
        "exporter, OTel off, --vm.name": [],
        "exporter, OTel on": [],
        "reference loop": [],
    }
    with otlp_receiver() as receiver, simulator(0) as sim:
        for _ in range(repeats):
            proc = ExporterProc(sim.url, name="exporter")
            try:
                ready["exporter, OTel off"].append(proc.wait_ready() * 1000)
            finally:
                proc.stop()
            proc = ExporterProc(sim.url, extra_args=["--vm.name=sim-vm-0"], name="exporter-named")
            try:  # the name given: no compute-metadata request before the first poll
                ready["exporter, OTel off, --vm.name"].append(proc.wait_ready() * 1000)
            finally:
                proc.stop()
            if receiver is not None:
                proc = ExporterProc(sim.url, otel_env=otel_env(receiver), name="exporter-otel")
                try:
                    ready["exporter, OTel on"].append(proc.wait_ready() * 1000)
                finally:
                    proc.stop()
            ref = ReferenceProc(sim.url)
            try:
                ready["reference loop"].append(ref.wait_first_document() * 1000)
            finally:
                ref.stop()
    report.table(
        "Start-up: spawn → ready (exporter: /-/ready 200; reference: first document printed), ms",
        ["process", "runs", "p50 ms", "min ms", "max ms"],
        [[k, len(v), round(percentile(v, 50), 1), round(min(v), 1), round(max(v), 1)] for k, v in ready.items() if v],
    )

    baseline = [_wall("pass") for _ in range(repeats)]
    rows: list[list[Any]] = []
    walls: dict[str, float] = {}
    for module in ("se_exporter.cli", "se_exporter.app", "se_exporter"):
        samples = [_wall(f"import {module}") for _ in range(repeats)]
        total, top, modules = importtime(module)
        walls[module] = (min(samples) - min(baseline)) * 1000
        rows.append([module, round(walls[module], 1), round(total, 1), modules])
    rows.append(["(python -c pass)", round(min(baseline) * 1000, 1), 0.0, "-"])
    report.table(
        "Import time (best of runs; wall minus interpreter start-up)",
        ["import", "wall ms", "-X importtime ms", "modules loaded"],
        rows,
    )
    _, top, _ = importtime("se_exporter.app")
    heavy = nested_imports("se_exporter.app")
    report.table(
        "Heaviest imports under se_exporter.app (cumulative ms, -X importtime)",
        ["module", "cumulative ms"],
        [[name, round(ms, 1)] for name, ms in heavy],
    )
    memory, reference = (_import_memory(module) for module in ("se_exporter.app", "benchmarks.reference_loop"))
    report.table(
        f"Resident memory at import, each in a fresh interpreter ({memory['bare_rss_kib'] / 1024:.1f} MiB bare): "
        f"{reference['rss_kib'] / 1024:.1f} MiB after the reference loop's imports, {memory['rss_kib'] / 1024:.1f} MiB "
        "after se_exporter.app; what se_exporter's own imports add (KiB)",
        ["module", "imported by", "KiB"],
        [[row["module"], row["by"], row["kib"]] for row in memory["imports"] if row["kib"] > 0],
    )
    report.data = {
        "import_memory": memory,
        "reference_import_memory": reference,
        "ready_ms": ready,
        "import_wall_ms": walls,
        "python_pass_ms": min(baseline) * 1000,
        "heaviest_imports": heavy,
        "top_level": top,
    }
    return report


def _import_memory(module: str) -> dict[str, Any]:
    """``benchmarks/import_memory.py`` on ``module``, in a fresh interpreter."""
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.import_memory", module],
        env=clean_env(),
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    )
    result: dict[str, Any] = json.loads(done.stdout)
    return result
