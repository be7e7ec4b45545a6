"""The benchmarks still start: ``python -m benchmarks --tiny --only NAME`` prints each benchmark's table.

The benchmarks themselves are not part of the test run (see BENCHMARKS.md); this only runs each one in its
tiny mode (seconds each; the scrape and heap benchmarks about 20 s) and checks it printed its table(s). One
test a benchmark, so that they spread over the workers and a failure names its benchmark.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.tools import require

pytestmark = [pytest.mark.posix, pytest.mark.full]

REPO = Path(__file__).resolve().parents[1]

# benchmark → the title of a table it must print
EXPECTED = {
    "footprint": "### CPU and memory at 1 s polling",
    "outage": "### Idle CPU with the collector dead",
    "onset": "### CPU in the 2 s after 150 events appeared at once, the collector dead",
    "poll": "### Cost per poll, fetch excluded",
    "actions": "### Poll with and without actions",
    "metrics": "### /metrics over HTTP vs a plain prometheus_client server",
    "scrape": "### /metrics over HTTP, every scrape a fresh render",
    "detection": "### Detection latency at 1 s polling",
    "startup": "### Start-up: spawn → ready",
    "writes": "### Disk writes (kB/s, /proc/PID/io write_bytes)",
    "series": "### Series per VM and for a 10,000-VM fleet",
    "fleet": "### Fleet of 20 VMs",
    "heap": "### Python heap by package, KiB (OTel off)",
}


def test_every_benchmark_has_a_smoke_test() -> None:
    from benchmarks.__main__ import BENCHMARKS, OPT_IN  # os.sysconf: not at import, where Windows collects this

    assert set(EXPECTED) == set(BENCHMARKS) - OPT_IN


# Nothing here is about time: the bound only ends a benchmark that hangs.
@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_the_benchmark_starts_and_prints_its_table(name: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SE_EXPORTER_", "OTEL_"))}
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--tiny", "--no-save", "--only", name],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=580,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    assert f"## {name}\n" in done.stdout, f"benchmark {name} did not run:\n{output[-4000:]}"
    section = done.stdout.split(f"## {name}\n", 1)[1]
    title = EXPECTED[name]
    assert title in section, f"benchmark {name} printed no table:\n{section[:2000]}"
    table = section.split(title, 1)[1]
    assert "\n| " in table and "|---" in table, f"benchmark {name}: malformed table:\n{table[:2000]}"


@pytest.mark.debian
@pytest.mark.timeout(900)
def test_the_fleet_benchmark_on_the_engine_starts_and_prints_its_tables() -> None:
    """Opt-in (``--only fleet_engine``): the fleet through vmagent's remote_write to VictoriaMetrics."""
    require("victoria-metrics")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SE_EXPORTER_", "OTEL_"))}
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--tiny", "--no-save", "--only", "fleet_engine"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=880,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    assert "### Fleet of 20 VMs, 1 h at a 60 s interval, through remote_write to VictoriaMetrics" in done.stdout
    assert "### Every dashboard query over 1 h" in done.stdout and "### Every rule's expression" in done.stdout


def test_reference_loop_is_plain_stdlib() -> None:
    """The reference stays the documented plain loop: stdlib only, one GET with Metadata: true."""
    source = (REPO / "benchmarks" / "reference_loop.py").read_text(encoding="utf-8")
    imports = {line.split()[1].split(".")[0] for line in source.splitlines() if line.startswith(("import ", "from "))}
    assert imports <= {"argparse", "contextlib", "json", "time", "urllib"}, imports
    assert '"Metadata": "true"' in source
