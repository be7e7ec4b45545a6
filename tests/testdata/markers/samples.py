"""Functions the marker detection (tests/support/markers.py) reads; never called."""

from __future__ import annotations

from pathlib import Path

from tests.deploy.helm import extract_helm
from tests.e2e.processes import Prometheus
from tests.rules.recipes import running
from tests.rules.tools import run
from tests.support.tools import require


def calls_promtool() -> None:
    run([require("promtool"), "check", "rules"])


def calls_alertmanager_by_either_name() -> None:
    require("prometheus-alertmanager", "alertmanager")


def starts_alertmanager_through_the_recipes(tmp_path: Path) -> None:
    with running(tmp_path, "route: {}"):
        pass


def extracts_helm(home: Path) -> None:
    extract_helm(home)


def _starts_prometheus(tmp_path: Path) -> None:
    Prometheus(require("prometheus"), tmp_path / "prometheus.yml", tmp_path)


def calls_a_helper_that_starts_prometheus(tmp_path: Path) -> None:
    _starts_prometheus(tmp_path)


def calls_gcc() -> None:
    require("gcc")


def names_promtool_in_a_string_only() -> None:
    print("promtool is not installed (apt-get install prometheus)")


def calls_a_helper_that_does_not() -> None:
    calls_gcc()
