"""The fleet overview's Events row: what each impact will hit, and every event listed now."""

from __future__ import annotations

from grafana_foundation_sdk.builders import bargauge as bargauge_panel
from grafana_foundation_sdk.models import common as cm
from grafana_foundation_sdk.models import dashboard as dm

from dashboards.mixin.config import JOB, SEL, m
from dashboards.mixin.events_table import events_table
from dashboards.mixin.grafana import LAST_VALUE, Layout, colours, override, panel, target, thresholds
from dashboards.mixin.kinds import stat, timeseries
from dashboards.mixin.mappings import IMPACT_COLOURS
from dashboards.mixin.panels import event_timeline
from dashboards.mixin.recording import JOB_VMS_PENDING


def events_row(lay: Layout) -> None:
    lay.row("Events")
    lay.add(upcoming_impact(), 18, 5)
    lay.add(
        stat(
            "Spot VMs at eviction risk",
            "VMs with a Spot eviction-risk notice for themselves (EventType SpotRebalanceRecommendation, impact "
            "eviction_risk, affects_this_vm true or unknown): Azure recommends moving work off them before "
            "capacity is reclaimed. Nothing is lost yet; a Preempt, with about 30 seconds of notice, may follow. "
            "Alert: AzureScheduledEventSpotEvictionRisk (info).",
            f'count(count by (cluster, job, instance) ({m("event_info")}{{{SEL}, impact="eviction_risk", '
            'affects_this_vm!="false"})) or vector(0)',
            "short",
            steps=thresholds((None, "green"), (1, "yellow")),
        ),
        6,
        5,
    )
    lay.add(
        events_table(
            "Current events",
            "Every event listed right now for the VM that lists it, if it may affect that VM (affects_this_vm "
            "true or unknown: all VMs of an availability set or scale set list the set's events; the VM "
            "detail dashboard shows them all). 'NotBefore' is the earliest start as a date and time, 'NotBefore "
            "in' the time left (empty once Started); 'Duration' is DurationInSeconds as announced by Azure (-1: "
            "unknown, 0: no impact); 'Approved at' is when this exporter's approval was accepted (Azure may "
            "still wait for NotBefore or the host's other tenants). Click an instance for its VM detail.",
            f'{SEL}, affects_this_vm!="false"',
        ),
        24,
        9,
    )
    lay.add(
        timeseries(
            "VMs with pending events by type and status",
            "Number of VMs with at least one event of each type and status that may affect them "
            "(affects_this_vm true or unknown: a set's event listed on every member VM counts only for the "
            "VMs in its Resources). From the recording rule " + JOB_VMS_PENDING + ": the selected jobs, every "
            "instance.",
            [
                target(
                    f"sum by (event_type, event_status) ({JOB_VMS_PENDING}{{{JOB}}})",
                    "{{event_type}} {{event_status}}",
                )
            ],
            "short",
            stacked=True,
            decimals=0,
        ),
        12,
        8,
    )
    lay.add(
        timeseries(
            "Distinct events by type and status",
            "Events counted once per event ID, whatever the number of VMs that see them.",
            [
                target(
                    f"count by (event_type, event_status) (count by (event_id, event_type, event_status) "
                    f"({m('event_info')}{{{SEL}}}))",
                    "{{event_type}} {{event_status}}",
                )
            ],
            "short",
            stacked=True,
            decimals=0,
        ),
        12,
        8,
    )
    lay.add(
        event_timeline(
            "Each listed event over time, for each VM it may affect (affects_this_vm true or unknown): yellow "
            "Scheduled, red Started, blue Advisory (a Spot eviction-risk notice); a gap means not listed (not yet "
            "announced, completed or cancelled).",
            f'{SEL}, affects_this_vm!="false"',
        ),
        24,
        8,
    )


def upcoming_impact() -> bargauge_panel.Panel:
    """How many VMs each impact will hit: the fleet's maintenance in one glance."""
    return (
        panel(
            bargauge_panel.Panel(),
            "Upcoming impact by kind",
            "VMs with a listed event for themselves (affects_this_vm true or unknown), by what the event will do: "
            "live_migration and pause only pause the VM for seconds; reboot loses memory; redeploy also loses the "
            "temporary disk; eviction (Spot) and termination remove the VM; eviction_risk (a Spot eviction-risk "
            "notice) loses nothing yet. An event listing several VMs counts "
            "once per VM. See the runbook for what each impact means for the workload.",
            [
                target(
                    f'count by (impact) ({m("event_info")}{{{SEL}, affects_this_vm!="false"}})',
                    "{{impact}}",
                    instant=True,
                )
            ],
            "short",
            overrides=[
                override(impact, color={"mode": "fixed", "fixedColor": colour}) for impact, colour in IMPACT_COLOURS
            ],
        )
        .color_scheme(colours(dm.FieldColorModeId.THRESHOLDS))
        .thresholds(thresholds((None, "text")))
        .min(0)
        .orientation(cm.VizOrientation.VERTICAL)
        .display_mode(cm.BarGaugeDisplayMode.BASIC)
        .show_unfilled(True)
        .reduce_options(LAST_VALUE)
    )
