"""Building the distributions as a release does, and installing them into clean virtual environments."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Distributions:
    wheel: Path
    sdist: Path


def checkout_files() -> list[Path]:
    """The checkout's files as a release's clean checkout holds them: tracked or not ignored, and present."""
    names = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        timeout=60,
        check=True,
    ).stdout
    return [path for path in (REPO / name for name in names.decode().split("\0") if name) if path.is_file()]


def build_distributions(out: Path) -> Distributions:
    """``python -m build``: the sdist, then the wheel built from it, each in an isolated environment. Built
    from a copy of the checkout's files: setuptools writes its egg-info and the sdist's tree into the source
    folder, and in this checkout other tests (the Windows suite's collection, ruff, mypy) would see them come
    and go."""
    with tempfile.TemporaryDirectory(prefix="se-exporter-source-") as copy:
        source = Path(copy)
        for path in checkout_files():
            (source / path.relative_to(REPO)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, source / path.relative_to(REPO))
        result = subprocess.run(
            [sys.executable, "-m", "build", "--outdir", str(out), str(source)],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (wheel,) = out.glob("*.whl")
    (sdist,) = out.glob("*.tar.gz")
    return Distributions(wheel, sdist)


def install_into_clean_venv(distribution: Path, venv: Path) -> Path:
    """A fresh venv (no pip of its own) with ``distribution`` installed by this interpreter's pip, without
    dependencies (none are needed for ``--version``); returns its ``se-exporter`` console script."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    scripts, suffix = ("Scripts", ".exe") if os.name == "nt" else ("bin", "")  # a venv's layout differs on Windows
    command = [
        sys.executable,
        "-m",
        "pip",
        "--python",
        str(venv / scripts / f"python{suffix}"),
        "install",
        "--quiet",
        "--no-deps",
        str(distribution),
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return venv / scripts / f"se-exporter{suffix}"
