"""Run Prometheus' command-line tools from tests: skip locally when missing, fail in CI."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from .promql import REPO_ROOT

INSTALL_HINT = {
    "promtool": "apt-get install prometheus (Debian) or a Prometheus release tarball",
    "amtool": "apt-get install prometheus-alertmanager (Debian) or an Alertmanager release tarball",
}


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def require(tool: str) -> str:
    """Path of a tool; skips the test if it is missing, unless CI is set (then the test fails)."""
    path = shutil.which(tool)
    if path:
        return path
    message = f"{tool} not found on PATH (install: {INSTALL_HINT.get(tool, tool)})"
    if in_ci():
        pytest.fail(f"{message}; CI is set, so missing tools are an error")
    pytest.skip(f"{message}; set CI=1 to make this a failure")


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
