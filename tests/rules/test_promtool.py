"""Prometheus rules and the Alertmanager example, checked by Prometheus' own tools."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from .promql import REPO_ROOT
from .tools import require, run

pytestmark = pytest.mark.debian

ALERTS = REPO_ROOT / "alerts"
RULES = ALERTS / "se-exporter.rules.yml"
TEXTFILE_RULES = ALERTS / "textfile" / "se-exporter.rules.yml"  # for --textfile.path: node_exporter's job
ALERTMANAGER = ALERTS / "alertmanager.yml"


def test_rules_pass_promtool_check() -> None:
    out = run([require("promtool"), "check", "rules", RULES, ALERTS / "aks.rules.yml", TEXTFILE_RULES])
    assert out.count("SUCCESS") == 3, out


def test_rule_unit_tests_pass() -> None:
    tests = sorted(ALERTS.glob("tests/*.yml"))
    assert tests, "no promtool unit tests in alerts/tests/"
    out = run([require("promtool"), "test", "rules", *tests])
    assert "FAILED" not in out, out


def test_alertmanager_config_is_valid() -> None:
    out = run([require("amtool"), "check-config", ALERTMANAGER])
    assert "SUCCESS" in out, out


@pytest.mark.parametrize(
    ("labels", "receiver"),
    [
        (["severity=critical", "alertname=AzureScheduledEventNotBeforeImminent"], "pager"),
        (["severity=warning", "alertname=AzureScheduledEventsIMDSDown"], "chat"),
        (["severity=info", "alertname=AzureScheduledEventStarted"], "null"),  # info: routed to nobody by default
        (["severity=info", "alertname=AzureScheduledEventSpotEvictionScheduled"], "null"),
        (["severity=info", "alertname=AzureScheduledEventSpotEvictionRisk"], "null"),  # routed like Spot evictions
        (["alertname=SomethingWithoutSeverity"], "chat"),
        (["severity=info", "alertname=AzureScheduledEventMaintenanceWindow"], "null"),  # an inhibition source only
    ],
)
def test_alertmanager_routes_by_severity(labels: list[str], receiver: str) -> None:
    out = run([require("amtool"), "config", "routes", "test", f"--config.file={ALERTMANAGER}", *labels])
    assert out.split() == [receiver], out


def test_rules_generated_with_another_job_selector_are_valid(tmp_path: Path) -> None:
    """The job selector is a template parameter of the generator: other values must work too."""
    subprocess.run(
        [
            sys.executable,
            REPO_ROOT / "dashboards" / "generate.py",
            "--output-dir",
            tmp_path,
            "--job-selector",
            'job="azure-maintenance", env="prod"',
        ],
        check=True,
    )
    rules = (tmp_path / "alerts" / "se-exporter.rules.yml").read_text(encoding="utf-8")
    assert 'up{job="azure-maintenance", env="prod"}' in rules
    run([require("promtool"), "check", "rules", tmp_path / "alerts" / "se-exporter.rules.yml"])
