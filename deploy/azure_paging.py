"""The paging policy of alerts/runbook.md on Azure Monitor managed Prometheus, which neither groups nor inhibits.

In Alertmanager a wave of 200 VMs is one page because the route groups the 200 alerts. Azure Monitor
notifies an action group once per alert instance, so the per-VM rules of ``alerts/`` notify nobody there
(they keep their severity and show in the portal) and each gets an aggregated twin that does: one alert
per cluster, or per job for series without a ``cluster`` label, whose value is how many VMs are in the
situation. Rules already said for a whole DaemonSet, job or view notify as they are.
"""

from __future__ import annotations

from typing import Any

# Alerts that are not per VM: one per job and cluster, per DaemonSet, or one for the whole view.
FLEET_ALERTS = frozenset(
    {
        "AzureScheduledEventsMaintenanceWave",
        "AzureScheduledEventsExporterAbsent",
        "AzureScheduledEventsExporterMissingOnNodes",
    }
)
# Only an inhibition source in Alertmanager: never notified, whatever the parameters, and no twin.
SILENT_ALERTS = frozenset({"AzureScheduledEventMaintenanceWindow"})
SUFFIX = "Aggregated"
FLEET_DASHBOARD_UID = "se-exporter-fleet"
GRAFANA_URL_PARAMETER = "grafanaUrl"
WHERE = "{{ if $labels.cluster }}in cluster {{ $labels.cluster }}{{ else }}of job {{ $labels.job }}{{ end }}"
DASHBOARD_QUERY = "{{ if $labels.job }}?var-job={{ $labels.job }}{{ end }}"


def aggregated_expression(expr: str) -> str:
    """How many VMs the per-VM expression holds, per cluster; per job where the series have no cluster.

    ``unless on (cluster) vector(1)`` keeps the series with a cluster (``vector(1)`` has none), ``and on
    (cluster) vector(1)`` the others: one alert per cluster, never merging two, and one per job elsewhere.
    """
    vms = f"count by (cluster, job, instance, node) (\n  {_indent(expr)}\n)"
    return (
        f"count by (cluster) (\n  {_indent(vms)}\n  unless on (cluster) vector(1)\n)\n"
        f"or\ncount by (job) (\n  {_indent(vms)}\n  and on (cluster) vector(1)\n)"
    )


def aggregated_rule(rule: dict[str, Any]) -> dict[str, Any]:
    """The twin of a per-VM alert rule (Prometheus-shaped): same severity, ``for`` and runbook."""
    name = rule["alert"]
    annotations = rule.get("annotations", {})
    summary = annotations.get("summary", name)
    twin: dict[str, Any] = {
        "alert": name + SUFFIX,
        "expr": aggregated_expression(rule["expr"]),
        "for": rule.get("for", "0m"),
        "labels": dict(rule["labels"]),
        "annotations": {
            "summary": f"{name} on {{{{ $value }}}} VM(s) {WHERE}",
            "description": (
                f"{summary} {{{{ $value }}}} VM(s) {WHERE} are in this situation. Each VM's own {name} alert is "
                "in the portal, with the same severity, and notifies nobody: Azure Monitor cannot group "
                "them, so this alert pages or posts once for the cluster (or job). Fleet overview: "
            ),
        },
    }
    if "runbook_url" in annotations:
        twin["annotations"]["runbook_url"] = annotations["runbook_url"]
    return twin


def is_per_vm(rule: dict[str, Any]) -> bool:
    return "alert" in rule and rule["alert"] not in FLEET_ALERTS


def has_twin(rule: dict[str, Any]) -> bool:
    return is_per_vm(rule) and rule["alert"] not in SILENT_ALERTS


def dashboard_link() -> str:
    """The fleet overview's path, after the Grafana URL parameter (joined by the ARM template)."""
    return f"/d/{FLEET_DASHBOARD_UID}/{DASHBOARD_QUERY}"


def _indent(text: str) -> str:
    return text.replace("\n", "\n  ")
