"""Azure Monitor managed Prometheus neither groups nor inhibits: the ARM rule groups page once per cluster.

The template's rule groups are turned back into a Prometheus rule file, each alert labelled with whom its
actions notify (``notifies``), and promtool evaluates them on issue 40's wave: 200 VMs of cluster ``prod``
with an unapproved platform Reboot within the lead time, one near Reboot in cluster ``dev``, and one on a
VM without a cluster label. Before issue 47 the pager was notified 202 times; now once per cluster (or job).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.support import REPO
from tests.rules.tools import require, run

TEMPLATE = json.loads((REPO / "deploy" / "azure" / "prometheus-rule-groups.json").read_text(encoding="utf-8"))
GRAFANA = "https://grafana.example"
NOTIFIES = {
    "criticalActionGroupResourceId": "pager",
    "warningActionGroupResourceId": "chat",
    "infoActionGroupResourceId": "info",
}
CONCAT = re.compile(r"^\[concat\('((?:[^']|'')*)', parameters\('grafanaUrl'\), '((?:[^']|'')*)'\)\]$")
WAVE, LEAD_MINUTE = 200, 12  # NotBefore 20 minutes after minute 0: within the 15-minute lead time at 12


def _arm_text(value: str) -> str:
    """What ARM makes of a string: "[[" is a literal "[", concat(…, parameters('grafanaUrl'), …) is joined."""
    if match := CONCAT.match(value):
        return match.group(1).replace("''", "'") + GRAFANA + match.group(2).replace("''", "'")
    assert not value.startswith("[") or value.startswith("[["), f"an ARM expression this test cannot read: {value}"
    return value[1:] if value.startswith("[[") else value


def _notifies(actions: str | list[Any]) -> str:
    if actions == []:
        return "nobody"
    (parameter,) = set(re.findall(r"parameters\('(\w+)'\)", str(actions)))
    return NOTIFIES[parameter]


def _duration(iso: str) -> str:
    hours, minutes, seconds = re.fullmatch(r"PT(?:(\d+)H)?(?:(\d+)M)?(?:(\d+)S)?", iso).groups()  # type: ignore[union-attr]
    return f"{int(hours or 0)}h{int(minutes or 0)}m{int(seconds or 0)}s"


def rule_file(template: dict[str, Any]) -> dict[str, Any]:
    """The template's rule groups as Prometheus evaluates them, each alert labelled with whom it notifies."""
    groups = []
    for resource in template["resources"]:
        rules = []
        for azure in resource["properties"]["rules"]:
            rule: dict[str, Any] = {"expr": _arm_text(azure["expression"])}
            if "record" in azure:
                rules.append({"record": azure["record"], **rule})
                continue
            labels = {key: _arm_text(value) for key, value in azure.get("labels", {}).items()}
            annotations = {key: _arm_text(value) for key, value in azure.get("annotations", {}).items()}
            labels["notifies"] = _notifies(azure["actions"])
            rule |= {"for": _duration(azure.get("for", "PT0M")), "labels": labels, "annotations": annotations}
            rules.append({"alert": azure["alert"], **rule})
        groups.append({"name": resource["name"], "rules": rules})
    return {"groups": groups}


def _vm(job: str, instance: str, cluster: str | None) -> list[dict[str, str]]:
    target = f'job="{job}", instance="{instance}"' + (f', cluster="{cluster}"' if cluster else "")
    event = f'{target}, event_id="R-{instance}", event_type="Reboot"'
    info = (
        f'{event}, event_status="Scheduled", event_source="Platform", resource_type="VirtualMachine", '
        'impact="reboot", cause="platform", affects_this_vm="true"'
    )
    return [
        {"series": f"up{{{target}}}", "values": "1x30"},
        {"series": f"azure_scheduled_events_event_info{{{info}}}", "values": "1x30"},
        {"series": f"azure_scheduled_events_event_seconds_until_not_before{{{event}}}", "values": "1200-60x30"},
    ]


def _count(notifies: str, expected: list[tuple[str, str]]) -> dict[str, Any]:
    """Firing alerts that notify ``notifies``, by alert name and scope: each exactly once."""
    return {
        "expr": f'count by (alertname, cluster, job) (ALERTS{{alertstate="firing", notifies="{notifies}"}})',
        "eval_time": f"{LEAD_MINUTE}m",
        "exp_samples": [
            {"labels": f"{{alertname={name!r}, {scope}}}".replace("'", '"'), "value": 1} for name, scope in expected
        ],
    }


def _page(scope: dict[str, str], vms: int, where: str, dashboard: str) -> dict[str, Any]:
    summary = "Azure will reboot or redeploy a VM within 15 minutes and nobody has approved it."
    return {
        "exp_labels": {"severity": "critical", "notifies": "pager", **scope},
        "exp_annotations": {
            "summary": f"AzureScheduledEventNotBeforeImminent on {vms} VM(s) {where}",
            "description": (
                f"{summary} {vms} VM(s) {where} are in this situation. Each VM's own "
                "AzureScheduledEventNotBeforeImminent alert is in the portal, with the same severity, and notifies "
                "nobody: Azure Monitor cannot group them, so this alert pages or posts once for the cluster (or "
                f"job). Fleet overview: {GRAFANA}/d/se-exporter-fleet/{dashboard}"
            ),
            "runbook_url": "https://github.com/se-exporter/se-exporter/blob/main/alerts/runbook.md#azurescheduledeventnotbeforeimminent",
        },
    }


@pytest.mark.debian
def test_a_wave_of_200_vms_pages_once_per_cluster_and_a_single_vm_once(tmp_path: Path) -> None:
    series = [s for n in range(WAVE) for s in _vm("se-exporter", f"vm-{n:03}:10160", "prod")]
    series += _vm("se-exporter", "dev-0:10160", "dev") + _vm("vm-se-exporter", "lone:10160", None)
    per_cluster = ['cluster="prod"', 'cluster="dev"', 'job="vm-se-exporter"']
    suite = {
        "rule_files": ["azure.rules.yml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "promql_expr_test": [
                    _count("pager", [("AzureScheduledEventNotBeforeImminentAggregated", s) for s in per_cluster]),
                    _count(
                        "chat",
                        [("AzureScheduledEventImpactfulScheduledAggregated", s) for s in per_cluster]
                        + [("AzureScheduledEventsMaintenanceWave", 'job="se-exporter", cluster="prod"')],
                    ),
                    {  # every VM's own alert still shows, with its severity
                        "expr": 'count by (alertname, severity) (ALERTS{alertstate="firing", notifies="nobody"})',
                        "eval_time": f"{LEAD_MINUTE}m",
                        "exp_samples": [
                            {
                                "labels": f'{{alertname="AzureScheduledEvent{name}", severity="{severity}"}}',
                                "value": WAVE + 2,
                            }
                            for name, severity in (("NotBeforeImminent", "critical"), ("ImpactfulScheduled", "warning"))
                        ],
                    },
                ],
                "alert_rule_test": [
                    {
                        "alertname": "AzureScheduledEventNotBeforeImminentAggregated",
                        "eval_time": f"{LEAD_MINUTE}m",
                        "exp_alerts": [
                            _page({"cluster": "prod"}, WAVE, "in cluster prod", ""),
                            _page({"cluster": "dev"}, 1, "in cluster dev", ""),
                            _page({"job": "vm-se-exporter"}, 1, "of job vm-se-exporter", "?var-job=vm-se-exporter"),
                        ],
                    },
                    {
                        "alertname": "AzureScheduledEventNotBeforeImminentAggregated",
                        "eval_time": "2m",
                        "exp_alerts": [],
                    },
                ],
            }
        ],
    }
    (tmp_path / "azure.rules.yml").write_text(yaml.safe_dump(rule_file(TEMPLATE), sort_keys=False), encoding="utf-8")
    (tmp_path / "wave.test.yml").write_text(yaml.safe_dump(suite, sort_keys=False), encoding="utf-8")
    out = run([require("promtool"), "test", "rules", tmp_path / "wave.test.yml"], timeout=300)
    assert "SUCCESS" in out, out
