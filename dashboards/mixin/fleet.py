"""The fleet overview dashboard: which VMs have maintenance coming, and how the exporters fare.

One function per row, in the order Grafana shows them; the Events row is in fleet_events.py and the
lifecycle and health rows in fleet_health.py.
"""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as db

from dashboards.mixin.config import DISRUPTIVE, FLEET_UID, SEL, m
from dashboards.mixin.fleet_events import events_row
from dashboards.mixin.fleet_health import health_row, lifecycle_row
from dashboards.mixin.frame import dashboard
from dashboards.mixin.grafana import Layout, thresholds
from dashboards.mixin.kinds import stat
from dashboards.mixin.mappings import up_expr
from dashboards.mixin.panels import soonest_not_before


def fleet_overview(job_selector: str) -> db.Dashboard:
    lay = Layout()
    now_row(lay, job_selector)
    events_row(lay)
    lifecycle_row(lay)
    health_row(lay, job_selector)
    return dashboard(
        FLEET_UID,
        "Azure Scheduled Events / Fleet overview",
        "Azure maintenance (Scheduled Events) across all VMs running se-exporter, and the exporters' health.",
        lay,
        instance_all_default=True,
    )


def now_row(lay: Layout, job_selector: str) -> None:
    """At a glance: VMs facing impact, events in progress, the soonest NotBefore, broken exporters."""
    impactful_info = f'{m("event_info")}{{{SEL}, impact=~"{DISRUPTIVE}", affects_this_vm!="false"}}'

    lay.row("Now")
    lay.add(
        stat(
            "VMs with impactful events",
            "Number of VMs (instances) with an event that reboots, redeploys, evicts or terminates them "
            "(impact reboot, redeploy, eviction or termination) listed for themselves (affects_this_vm is "
            "true or unknown), Scheduled or Started. Pauses and live migrations are not counted here.",
            f"count(count by (job, instance) ({impactful_info})) or vector(0)",
            "short",
            steps=thresholds((None, "green"), (1, "orange")),
        ),
        4,
        4,
    )
    lay.add(
        stat(
            "Events in progress",
            "Distinct events now in status Started (maintenance in progress), all types. "
            "An event seen by several VMs of an availability set or scale set counts once.",
            f'count(count by (event_id) ({m("event_info")}{{{SEL}, event_status="Started"}})) or vector(0)',
            "short",
            steps=thresholds((None, "green"), (1, "red")),
        ),
        4,
        4,
    )
    lay.add(
        soonest_not_before(
            "Time until the earliest NotBefore of the events that reboot, move or remove a VM they may affect "
            "(pauses, live migrations and other VMs' events are left out; negative: passed, not yet Started). "
            "Red below 5 minutes.",
        ),
        4,
        4,
    )
    lay.add(
        stat(
            "Exporters down",
            "se-exporter targets Prometheus cannot scrape (up == 0). During a Reboot or Redeploy the VM's "
            "own exporter is down too.",
            f"count({up_expr(job_selector)} == 0) or vector(0)",
            "short",
            steps=thresholds((None, "green"), (1, "red")),
        ),
        4,
        4,
    )
    lay.add(
        stat(
            "IMDS failing",
            "Exporters whose last IMDS poll failed (azure_scheduled_events_imds_up == 0): those VMs' "
            "maintenance events are not visible.",
            f"count({m('imds_up')}{{{SEL}}} == 0) or vector(0)",
            "short",
            steps=thresholds((None, "green"), (1, "red")),
        ),
        4,
        4,
    )
    lay.add(
        stat(
            "Oldest successful poll",
            "Age of the oldest 'last successful IMDS poll' across the selected exporters "
            "(time() - azure_scheduled_events_last_successful_poll_timestamp_seconds). Alerts above 5 minutes.",
            f"max(time() - {m('last_successful_poll_timestamp_seconds')}{{{SEL}}})",
            "s",
            steps=thresholds((None, "green"), (60, "orange"), (300, "red")),
        ),
        4,
        4,
    )
