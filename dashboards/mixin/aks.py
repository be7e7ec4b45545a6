"""The optional AKS rule group (alerts/aks.rules.yml): our events joined with kube-state-metrics by node.

AKS cordons and drains a node for some events (node auto-drain: Redeploy, Preempt, Terminate) and not for
others (a Reboot); a team's own action or hook may drain it too. The alert fires when a disruptive event for
a node is near and the node is still schedulable: nothing is draining it in time. It needs the ``node``
label on our series (the chart's and the kustomization's monitors add it) and kube-state-metrics'
``kube_node_spec_unschedulable``. It also counts the nodes without a ready exporter, from
kube-state-metrics' DaemonSet status: ``AzureScheduledEventsExporterAbsent`` fires only when every exporter
is gone.
"""

from __future__ import annotations

from typing import Any

from dashboards.mixin.alert_parts import DISRUPTIVE_IMPACTS, MEANING, SCHEDULED, alert, joined
from dashboards.mixin.config import Settings, m

NEAR_SECONDS = 600  # "near": within the 10 minutes before NotBefore that Azure gives a Reboot at the least
UNCORDONED = "kube_node_spec_unschedulable == 0"
LISTS_THIS_NODE = 'affects_this_vm="true"'  # the node's own VM, known by name: the join is by node


def aks_rules(settings: Settings) -> list[dict[str, Any]]:
    until = m("event_seconds_until_not_before")
    daemonsets = f'daemonset=~"{settings.daemonset_regex}"'
    return [
        alert(
            "AzureScheduledEventsExporterMissingOnNodes",
            f"kube_daemonset_status_desired_number_scheduled{{{daemonsets}}}\n"
            f"  - kube_daemonset_status_number_ready{{{daemonsets}}}\n"
            "> 0",
            "15m",
            "warning",
            "Some nodes have no running se-exporter: their Azure maintenance is not seen.",
            "{{ $value }} node(s) that DaemonSet {{ $labels.namespace }}/{{ $labels.daemonset }} should run on "
            "have had no ready se-exporter pod for 15 minutes (kube-state-metrics: desired minus ready): "
            "maintenance of those nodes is neither shown nor alerted on, while the other nodes' exporters hide "
            "the gap from AzureScheduledEventsExporterAbsent. kubectl get pods -o wide shows which nodes; look "
            "for image pull errors, taints the DaemonSet does not tolerate, or a failing IMDS readiness.",
        ),
        alert(
            "AzureScheduledEventNodeNotCordoned",
            f"{joined(f'({until} < {NEAR_SECONDS})', f'{SCHEDULED}, {DISRUPTIVE_IMPACTS}, {LISTS_THIS_NODE}')}\n"
            f"and on (cluster, node) ({UNCORDONED})",
            "2m",
            "warning",
            "Azure maintenance is near for a node that nobody has cordoned.",
            "{{ $labels.event_type }} event {{ $labels.event_id }} (impact {{ $labels.impact }}, cause "
            "{{ $labels.cause }}) can start on node {{ $labels.node }} ({{ $labels.instance }}) in "
            "{{ $value | humanizeDuration }}, and the node is still schedulable: neither AKS node auto-drain "
            f"nor an action or hook is draining it. {MEANING} Cordon and drain the node now, or accept the impact.",
        ),
    ]
