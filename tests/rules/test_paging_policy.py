"""The paging policy of alerts/runbook.md as a table, held by promtool on the shipped rules.

Each row is one event on a VM of its own job (so no row makes a maintenance wave of the others), announced
20 minutes ahead and Started at minute 21. For three moments (the notice, within the 15-minute lead time, and
Started) the row lists every alert that fires for it, with its severity: promtool evaluates the rules and
``ALERTS`` must hold exactly those, nothing more. A row that pages twice, or a warning that becomes a page,
fails here.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple

import pytest
import yaml

from .promql import REPO_ROOT
from .tools import require, run

pytestmark = pytest.mark.pure

NOTICE, LEAD, STARTED = 2, 12, 24  # minutes: NotBefore 20 minutes after minute 0, Started at minute 21


class Row(NamedTuple):
    case: str
    event_type: str
    impact: str
    cause: str
    affects: str = "true"
    approved: bool = False
    # alert name -> severity, at the notice, within the lead time, and once Started
    notice: dict[str, str] = {}  # noqa: RUF012 - a NamedTuple's defaults are never mutated here
    lead: dict[str, str] = {}  # noqa: RUF012
    started: dict[str, str] = {}  # noqa: RUF012
    status: str = ""  # listed in this status all along (Advisory), not Scheduled then Started


W, C, INFO = "warning", "critical", "info"
SCHEDULED_WARNING = {"AzureScheduledEventImpactfulScheduled": W}
PAGE = {**SCHEDULED_WARNING, "AzureScheduledEventNotBeforeImminent": C}
DOWN = {"AzureScheduledEventStarted": INFO, "AzureScheduledEventMaintenanceWindow": INFO}

POLICY = [
    Row("platform-reboot", "Reboot", "reboot", "platform", notice=SCHEDULED_WARNING, lead=PAGE, started=DOWN),
    Row("platform-redeploy", "Redeploy", "redeploy", "platform", notice=SCHEDULED_WARNING, lead=PAGE, started=DOWN),
    Row(
        "failure-redeploy",
        "Redeploy",
        "redeploy",
        "failure",
        notice=SCHEDULED_WARNING,
        lead=PAGE,
        started={**DOWN, "AzureScheduledEventHardwareFailure": W},
    ),
    Row(
        "approved-reboot",
        "Reboot",
        "reboot",
        "platform",
        approved=True,
        notice=SCHEDULED_WARNING,
        lead={**SCHEDULED_WARNING, "AzureScheduledEventApprovedWaiting": INFO},
        started=DOWN,
    ),
    Row(
        "unknown-vm-reboot",
        "Reboot",
        "reboot",
        "platform",
        affects="unknown",
        notice=SCHEDULED_WARNING,
        lead={**PAGE, "AzureScheduledEventsVMIdentityUnknown": W},
        started={**DOWN, "AzureScheduledEventsVMIdentityUnknown": W},
    ),
    Row("other-vm-reboot", "Reboot", "reboot", "platform", affects="false"),
    # No EventSource (api-version before 2019-08-01): maybe the user's own; warned, never paged.
    Row(
        "unknown-cause-reboot",
        "Reboot",
        "reboot",
        "unknown",
        notice=SCHEDULED_WARNING,
        lead=SCHEDULED_WARNING,
        started=DOWN,
    ),
    Row(
        "new-event-type",
        "Hibernate",
        "unknown",
        "platform",
        notice=SCHEDULED_WARNING,
        lead=SCHEDULED_WARNING,
        started={"AzureScheduledEventStarted": INFO},
    ),
    Row(
        "user-reboot",
        "Reboot",
        "reboot",
        "user",
        notice={"AzureScheduledEventUserInitiatedScheduled": INFO},
        lead={"AzureScheduledEventUserInitiatedScheduled": INFO},
        started=DOWN,
    ),
    Row(
        "scale-in",
        "Terminate",
        "termination",
        "user",
        notice={"AzureScheduledEventUserInitiatedScheduled": INFO},
        lead={"AzureScheduledEventUserInitiatedScheduled": INFO},
        started=DOWN,
    ),
    Row(
        "spot-eviction",
        "Preempt",
        "eviction",
        "platform",
        notice={"AzureScheduledEventSpotEvictionScheduled": INFO},
        lead={"AzureScheduledEventSpotEvictionScheduled": INFO},
        started=DOWN,
    ),
    Row(
        "host-pause",
        "Freeze",
        "pause",
        "platform",
        notice={"AzureScheduledEventPauseScheduled": INFO},
        lead={"AzureScheduledEventPauseScheduled": INFO},
    ),
    Row(
        "live-migration",
        "Freeze",
        "live_migration",
        "platform",
        notice={"AzureScheduledEventLiveMigrationScheduled": INFO},
        lead={"AzureScheduledEventLiveMigrationScheduled": INFO},
    ),
    Row("no-impact-freeze", "Freeze", "none", "platform"),
    # A Spot eviction-risk notice, listed Advisory throughout: info, whatever its status, never a page.
    Row(
        "spot-eviction-risk",
        "SpotRebalanceRecommendation",
        "eviction_risk",
        "platform",
        status="Advisory",
        notice={"AzureScheduledEventSpotEvictionRisk": INFO},
        lead={"AzureScheduledEventSpotEvictionRisk": INFO},
        started={"AzureScheduledEventSpotEvictionRisk": INFO},
    ),
]


def _series(row: Row) -> list[dict[str, str]]:
    target = f'job="{row.case}", instance="{row.case}:10160", node="{row.case}", cluster="prod"'
    event = f'{target}, event_id="{row.case}", event_type="{row.event_type}"'
    source = "User" if row.cause == "user" else "Platform"
    info = (
        f'{event}, event_source="{source}", resource_type="VirtualMachine", impact="{row.impact}", '
        f'cause="{row.cause}", affects_this_vm="{row.affects}"'
    )
    if row.status:  # no NotBefore, no start: listed until the end
        return [
            {"series": f'azure_scheduled_events_event_info{{{info}, event_status="{row.status}"}}', "values": "1x26"}
        ]
    series = [
        {"series": f'azure_scheduled_events_event_info{{{info}, event_status="Scheduled"}}', "values": "1x20 stale"},
        {"series": f'azure_scheduled_events_event_info{{{info}, event_status="Started"}}', "values": "_x21 1x5"},
        {"series": f"azure_scheduled_events_event_seconds_until_not_before{{{event}}}", "values": "1200-60x20 stale"},
        {"series": f"azure_scheduled_events_event_started_seconds{{{event}}}", "values": "_x21 0+60x5"},
    ]
    if row.approved:
        series.append(
            {"series": f"azure_scheduled_events_event_approved_timestamp_seconds{{{event}}}", "values": "_ 60x19"}
        )
    return series


def _expected(minute: int, pick: str) -> dict[str, object]:
    samples = [
        {"labels": f'{{job="{row.case}", alertname="{name}", severity="{severity}"}}', "value": 1}
        for row in POLICY
        for name, severity in getattr(row, pick).items()
    ]
    return {
        # Every alert of the rows' jobs ("job" drops ExporterAbsent: no up series here, on purpose).
        "expr": 'count by (job, alertname, severity) (ALERTS{alertstate="firing", job!=""})',
        "eval_time": f"{minute}m",
        "exp_samples": samples,
    }


@pytest.mark.debian
def test_each_event_gets_the_alerts_the_paging_policy_says_and_no_more(tmp_path: Path) -> None:
    (tmp_path / "rules.yml").write_bytes((REPO_ROOT / "alerts" / "se-exporter.rules.yml").read_bytes())
    suite = {
        "rule_files": ["rules.yml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [series for row in POLICY for series in _series(row)],
                "promql_expr_test": [
                    _expected(NOTICE, "notice"),
                    _expected(LEAD, "lead"),
                    _expected(STARTED, "started"),
                ],
            }
        ],
    }
    (tmp_path / "policy.test.yml").write_text(yaml.safe_dump(suite, sort_keys=False), encoding="utf-8")
    out = run([require("promtool"), "test", "rules", tmp_path / "policy.test.yml"])
    assert "FAILED" not in out, out


def test_the_table_pages_only_platform_and_failure_reboots_and_redeploys_of_this_vm() -> None:
    """The table itself says the policy: a page only where the runbook's paging policy puts one."""
    paged = {row.case for row in POLICY if C in (*row.notice.values(), *row.lead.values(), *row.started.values())}
    assert paged == {"platform-reboot", "platform-redeploy", "failure-redeploy", "unknown-vm-reboot"}
    assert all(C not in row.notice.values() for row in POLICY), "a page before the lead time"


def test_the_runbooks_paging_policy_names_each_alerts_severity() -> None:
    """Every alert of the shipped rules (the AKS group's too) is a row of the runbook's paging policy, with
    the severity the rule gives it."""
    rules = [
        rule
        for name in ("se-exporter.rules.yml", "aks.rules.yml")
        for group in yaml.safe_load((REPO_ROOT / "alerts" / name).read_text(encoding="utf-8"))["groups"]
        for rule in group["rules"]
        if "alert" in rule
    ]
    runbook = (REPO_ROOT / "alerts" / "runbook.md").read_text(encoding="utf-8")
    policy = runbook[runbook.index("## Paging policy") : runbook.index("## Common procedures")]
    stated = {
        anchor: severity
        for first, severity in re.findall(r"^\| (.+?) \| (critical|warning|info) \|", policy, flags=re.M)
        for anchor in re.findall(r"\(#(\w+)\)", first)
    }
    assert stated == {rule["alert"].lower(): rule["labels"]["severity"] for rule in rules}
