"""The soak test: the exporter tells the simulator's ground truth, whatever happens around it.

``test_soak_short`` (~70 s) runs in the normal suite. The long version is opt-in::

    SE_SOAK_MINUTES=10 .venv/bin/pytest tests/soak -k long -s

(``SE_SOAK_SEED`` replays a history; ``SE_SOAK_REPORT=path.json`` keeps the figures.) See
docs/reliability.md (Soak test) for what is checked and the figures of a long run.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.soak.chaos import SoakConfig, run_soak, write_summary
from tests.soak.checks import all_checks, summarise
from tests.support.exporter_process import ExporterProcess

pytestmark = [pytest.mark.posix, pytest.mark.full]

StartExporter = Callable[..., ExporterProcess]
SEED = int(os.environ.get("SE_SOAK_SEED", "20240617"))
MINUTES = float(os.environ.get("SE_SOAK_MINUTES") or 0)


def _report(figures: dict[str, object], tmp_path: Path) -> None:
    write_summary(tmp_path / "soak-summary.json", figures)
    if target := os.environ.get("SE_SOAK_REPORT"):
        write_summary(Path(target), figures)
    print("\nsoak figures:\n" + summarise(figures))


@pytest.mark.long
@pytest.mark.timeout(240)
def test_soak_short(tmp_path: Path, start_exporter: StartExporter) -> None:
    result = run_soak(SoakConfig.short(SEED), tmp_path, start_exporter)
    figures = all_checks(result)
    _report(figures, tmp_path)
    assert figures["records_lost"] == 0
    assert figures["exporter_runs"] >= 3  # the first process, then after a SIGKILL and a SIGTERM
    assert figures["exporter_pauses"] >= 1  # and a SIGSTOP beyond a gap in its view


@pytest.mark.slow
@pytest.mark.timeout(int(MINUTES * 60 + 600) if MINUTES else 7200)
def test_soak_long(tmp_path: Path, start_exporter: StartExporter, request: pytest.FixtureRequest) -> None:
    minutes = MINUTES or float(request.config.getoption("--soak-minutes") or 0)
    if not minutes and request.config.getoption("--soak"):
        minutes = 10.0
    if not minutes:
        pytest.skip("long soak: run with --soak (10 minutes), --soak-minutes=N or SE_SOAK_MINUTES=N")
    result = run_soak(SoakConfig.long(minutes, SEED), tmp_path, start_exporter)
    figures = all_checks(result)
    _report(figures, tmp_path)
    assert figures["records_lost"] == 0
