"""The suite's one-at-a-time groups hold: tests marked ``xdist_group`` run on one worker.

The chart-pod tests share the node's port 10160 and the Wine tests one Wine server; they rely on
``--dist loadgroup``. pytest 9.2 broke it silently (pytest-xdist 3.8 could no longer tag node ids with
their group, so two pods started on the same port at once): pyproject.toml pins pytest below 9.2, and
this test fails if a pair of versions breaks it again.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

GROUPED = """
import os, pathlib, pytest
pytestmark = pytest.mark.xdist_group("one-at-a-time")

@pytest.mark.parametrize("n", range(4))
def test_worker(n):
    pathlib.Path(__file__).with_name(f"{n}.worker").write_text(os.environ["PYTEST_XDIST_WORKER"])
"""


def test_tests_of_one_group_run_on_one_worker(tmp_path: Path) -> None:
    (tmp_path / "test_grouped.py").write_text(GROUPED)
    options = ["-n", "2", "--dist", "loadgroup", "-p", "no:cacheprovider", "-p", "no:cloudcoil", "-q"]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *options, str(tmp_path / "test_grouped.py")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    workers = {path.read_text() for path in tmp_path.glob("*.worker")}
    assert done.returncode == 0 and len(list(tmp_path.glob("*.worker"))) == 4, done.stdout[-2000:]
    assert len(workers) == 1, f"one group ran on {sorted(workers)}"
