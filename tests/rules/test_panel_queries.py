"""The fleet dashboard's "when" and "which VM" panels, their queries evaluated by Prometheus' engine (promtool)
on a set's event that two VMs list: it affects vm1 only (issue 40: every VM that merely sees it counted)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.rules.dashboard_queries import dashboard_queries

from .tools import require, run

FLEET = "fleet-overview.json"
EVENT = 'job="se-exporter", event_type="{type}", event_id="{id}"'


def _info(instance: str, event_id: str, event_type: str, impact: str, affects: str) -> dict[str, str]:
    labels = (
        f'instance="{instance}", {EVENT.format(type=event_type, id=event_id)}, event_status="Scheduled", '
        f'event_source="Platform", resource_type="VirtualMachine", impact="{impact}", cause="platform", '
        f'affects_this_vm="{affects}"'
    )
    return {"series": f"azure_scheduled_events_event_info{{{labels}}}", "values": "1x10"}


def _gauge(name: str, instance: str, event_id: str, event_type: str, value: int) -> dict[str, str]:
    labels = f'instance="{instance}", {EVENT.format(type=event_type, id=event_id)}'
    return {"series": f"azure_scheduled_events_{name}{{{labels}}}", "values": f"{value}x10"}


SCENE = [
    # The set's Reboot R1: listed on vm1 (its Resources) and vm2 (a neighbour), NotBefore in 10 minutes.
    _info("vm1", "R1", "Reboot", "reboot", "true"),
    _info("vm2", "R1", "Reboot", "reboot", "false"),
    _gauge("event_seconds_until_not_before", "vm1", "R1", "Reboot", 600),
    _gauge("event_seconds_until_not_before", "vm2", "R1", "Reboot", 600),
    _gauge("event_not_before_timestamp_seconds", "vm1", "R1", "Reboot", 1_800_000_600),
    _gauge("event_not_before_timestamp_seconds", "vm2", "R1", "Reboot", 1_800_000_600),
    # Sooner, but not "when the VM goes": vm3's live migration, and vm4 seeing another VM's Redeploy.
    _info("vm3", "L1", "Freeze", "live_migration", "true"),
    _gauge("event_seconds_until_not_before", "vm3", "L1", "Freeze", 60),
    _info("vm4", "D1", "Redeploy", "redeploy", "false"),
    _gauge("event_seconds_until_not_before", "vm4", "D1", "Redeploy", 30),
]


def _query(title: str, ref: str) -> str:
    (query,) = [
        q.expr
        for q in dashboard_queries(rate_interval="1m")
        if q.dashboard_file == FLEET and q.panel_title == title and q.ref_id == ref
    ]
    return query


@pytest.mark.debian
def test_the_fleet_says_when_and_which_vm(tmp_path: Path) -> None:
    cases = [
        # Soonest NotBefore: the Reboot's 600 s, not the live migration's 60 nor another VM's 30.
        {"expr": _query("Soonest NotBefore", "A"), "eval_time": "5m", "exp_samples": [{"labels": "{}", "value": 600}]},
        # Current events: one row for R1 (vm1's), not one per VM that lists it; NotBefore as a clock time (ms).
        {
            "expr": f"count({_query('Current events', 'A')})",
            "eval_time": "5m",
            "exp_samples": [{"labels": "{}", "value": 2}],  # R1 on vm1, and vm3's live migration
        },
        {
            "expr": _query("Current events", "B"),
            "eval_time": "5m",
            "exp_samples": [
                {"labels": '{job="se-exporter", instance="vm1", event_id="R1"}', "value": 1_800_000_600_000}
            ],
        },
    ]
    suite = {
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": SCENE, "promql_expr_test": cases}],
    }
    path = tmp_path / "panels.test.yml"
    path.write_text(yaml.safe_dump(suite, sort_keys=False), encoding="utf-8")
    out = run([require("promtool"), "test", "rules", path])
    assert "FAILED" not in out, out
