"""deploy/azure/prometheus-rule-groups.json: the rules of alerts/ as Azure Monitor managed Prometheus rule
groups (Microsoft.AlertsManagement/prometheusRuleGroups, API 2023-03-01), and the chart's values table."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from deploy.azure_paging import has_twin
from deploy.copies import TABLE_BEGIN, TABLE_END, iso8601, values_table
from tests.deploy.helm import CHART
from tests.deploy.support import REPO, load_yaml

pytestmark = pytest.mark.pure

TEMPLATE = json.loads((REPO / "deploy" / "azure" / "prometheus-rule-groups.json").read_text(encoding="utf-8"))
# The resource's documented properties (learn.microsoft.com, prometheusRuleGroups, 2023-03-01).
GROUP_PROPERTIES = {"description", "scopes", "clusterName", "enabled", "interval", "rules"}
RULE_PROPERTIES = {"record", "alert", "expression", "for", "severity", "resolveConfiguration", "actions"}
RULE_PROPERTIES |= {"labels", "annotations", "enabled"}
ISO8601 = re.compile(r"^PT(\d+H)?(\d+M)?(\d+S)?$")


def _literal(text: str) -> str:
    """What ARM makes of a string: "[[" is an escaped "["."""
    return text[1:] if text.startswith("[[") else text


def _groups() -> dict[str, tuple[dict[str, Any], bool]]:
    """Rule group name -> (group, from the optional AKS file)."""
    shipped = load_yaml(REPO / "alerts" / "se-exporter.rules.yml")["groups"]
    aks = load_yaml(REPO / "alerts" / "aks.rules.yml")["groups"]
    return {g["name"]: (g, False) for g in shipped} | {g["name"]: (g, True) for g in aks}


def test_every_rule_of_alerts_is_a_rule_of_the_template_with_the_same_expression() -> None:
    resources = {resource["name"]: resource for resource in TEMPLATE["resources"]}
    groups = _groups()
    assert set(resources) == {name.replace(".", "-") for name in groups}
    for name, (group, optional) in groups.items():
        resource = resources[name.replace(".", "-")]
        assert resource["type"] == "Microsoft.AlertsManagement/prometheusRuleGroups"
        assert resource["apiVersion"] == "2023-03-01"
        assert ("condition" in resource) == optional, name  # the AKS group only with aksRules=true
        properties = resource["properties"]
        assert set(properties) <= GROUP_PROPERTIES and ISO8601.match(properties["interval"])
        assert properties["scopes"] == ["[parameters('azureMonitorWorkspaceResourceId')]"]
        # The group's rules, then the aggregated twins of its per-VM alerts (test_azure_paging.py).
        twins = [rule for rule in group["rules"] if has_twin(rule)]
        assert [rule.get("alert") for rule in properties["rules"][len(group["rules"]) :]] == [
            rule["alert"] + "Aggregated" for rule in twins
        ]
        for rule, azure in zip(group["rules"], properties["rules"][: len(group["rules"])], strict=True):
            assert set(azure) <= RULE_PROPERTIES, set(azure) - RULE_PROPERTIES
            assert azure.get("record") == rule.get("record") and azure.get("alert") == rule.get("alert")
            assert _literal(azure["expression"]) == rule["expr"]
            assert {k: _literal(v) for k, v in azure.get("labels", {}).items()} == rule.get("labels", {})
            annotations = {k: _literal(v) for k, v in azure.get("annotations", {}).items()}
            assert annotations == rule.get("annotations", {})
            if "alert" in rule:
                severity = {"critical": 0, "warning": 2, "info": 3}[rule["labels"]["severity"]]
                assert azure["severity"] == severity
                assert azure.get("for", "PT0M") == iso8601(rule.get("for", "0m"))
                assert ISO8601.match(azure["resolveConfiguration"]["timeToResolve"])


def test_each_severity_has_its_action_group_and_per_vm_alerts_and_the_inhibition_source_none() -> None:
    """Issue 40: one action group for every rule paged for MaintenanceWindow and info alerts too. Issue 47:
    a per-VM alert notifies nobody (a wave paged once per VM); its aggregated twin notifies instead."""
    alerts = {
        azure["alert"]: azure
        for resource in TEMPLATE["resources"]
        for azure in resource["properties"]["rules"]
        if "alert" in azure
    }
    by_severity = {0: "critical", 2: "warning", 3: "info"}
    for name, azure in alerts.items():
        if name == "AzureScheduledEventMaintenanceWindow":
            assert azure["actions"] == [], "an inhibition source in Alertmanager: never notified"
            assert name + "Aggregated" not in alerts
            continue
        if name + "Aggregated" in alerts:
            assert azure["actions"] == [], f"{name} is per VM: its aggregated twin notifies"
            assert alerts[name + "Aggregated"]["severity"] == azure["severity"]
            continue
        (parameter,) = set(re.findall(r"parameters\('(\w+)'\)", azure["actions"]))
        assert parameter == f"{by_severity[azure['severity']]}ActionGroupResourceId", name


def test_parameters_say_where_and_whom_to_tell() -> None:
    parameters = TEMPLATE["parameters"]
    assert "defaultValue" not in parameters["azureMonitorWorkspaceResourceId"]  # required
    assert parameters["aksRules"] == {
        "type": "bool",
        "defaultValue": False,
        "metadata": parameters["aksRules"]["metadata"],
    }
    for name in ("clusterName", "criticalActionGroupResourceId", "warningActionGroupResourceId", "grafanaUrl"):
        assert parameters[name]["defaultValue"] == ""
    assert parameters["infoActionGroupResourceId"]["defaultValue"] == "", "info: nobody by default"
    used = set(re.findall(r"parameters\('(\w+)'\)", json.dumps(TEMPLATE["resources"])))
    assert used == set(parameters)


@pytest.mark.parametrize(
    ("prometheus", "iso"),
    [("0m", "PT0M"), ("5m", "PT5M"), ("30s", "PT30S"), ("1h", "PT1H"), ("1h30m", "PT1H30M"), ("2h0m15s", "PT2H15S")],
)
def test_durations_in_iso8601(prometheus: str, iso: str) -> None:
    assert iso8601(prometheus) == iso


@pytest.mark.parametrize("bad", ["", "5d", "1w", "m", "5 m"])
def test_a_duration_iso8601_cannot_say_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="cannot express the duration"):
        iso8601(bad)


def test_the_values_table_of_docs_helm_is_the_schemas() -> None:
    page = (REPO / "docs" / "helm.md").read_text(encoding="utf-8")
    schema = json.loads((CHART / "values.schema.json").read_text(encoding="utf-8"))
    assert page == values_table(page, schema), "run: python dashboards/generate.py"
    table = page[page.index(TABLE_BEGIN) : page.index(TABLE_END)]
    for key in ("image.repository", "serviceMonitor.apiVersion", "prometheusRule.aksRules", "windows.enabled"):
        assert f"| `{key}` |" in table
    rows = {re.match(r"\| `([\w.]+)`", row).group(1).split(".")[0] for row in table.splitlines()[3:]}  # type: ignore[union-attr]
    assert set(load_yaml(CHART / "values.yaml")) == rows  # every top-level value has its row
