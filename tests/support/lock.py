"""uv.lock read the ways the project installs from it: as uv exports it (hashed requirements) and as data."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.tools import unavailable

REPO = Path(__file__).resolve().parents[2]
LOCK = REPO / "uv.lock"


def uv() -> str:
    """The uv the README's command installs (from .ci/uv.txt), beside this interpreter."""
    found = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
    if found is None:
        unavailable("uv not found (pip install --require-hashes -r .ci/uv.txt)")
    return found


def run_uv(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    """uv offline: what is checked here is the files, never the index."""
    return subprocess.run([uv(), *args, "--offline"], cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


def locked_requirements(*selection: str) -> str:
    """``uv export`` of the lock: pinned, with every file's hash (the image's builder stage runs the same)."""
    exported = run_uv("export", "--frozen", "--no-emit-project", "--format", "requirements-txt", *selection)
    assert exported.returncode == 0, exported.stderr
    return exported.stdout


@dataclass(frozen=True)
class Locked:
    name: str
    version: str
    hashes: frozenset[str]  # of every wheel and the sdist


def locked_packages() -> dict[str, list[Locked]]:
    """The lock's packages by name (a name may be locked at two versions, one per Python)."""
    packages: dict[str, list[Locked]] = {}
    for package in tomllib.loads(LOCK.read_text(encoding="utf-8"))["package"]:
        files: list[dict[str, Any]] = [*package.get("wheels", []), *([package["sdist"]] if "sdist" in package else [])]
        hashes = frozenset(file["hash"] for file in files if "hash" in file)
        packages.setdefault(package["name"], []).append(Locked(package["name"], package.get("version", ""), hashes))
    return packages
