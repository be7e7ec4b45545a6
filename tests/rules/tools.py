"""Run Prometheus' command-line tools from tests (found, or not, by ``tests.support.tools.require``)."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from tests.support.tools import require

from .promql import REPO_ROOT

__all__ = ["require", "run"]


def run(args: Sequence[str | Path], *, cwd: Path = REPO_ROOT, timeout: float = 120) -> str:
    """Run a command; fail the test with its full output unless it exits 0. Returns stdout."""
    proc = subprocess.run([str(a) for a in args], cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        pytest.fail(
            f"`{' '.join(str(a) for a in args)}` exited {proc.returncode}\n"
            f"--- stdout ---\n{proc.stdout}\n--- stderr ---\n{proc.stderr}",
            pytrace=False,
        )
    return proc.stdout
