"""The fleet overview's Events row: what each impact will hit, and every event listed now."""

from __future__ import annotations

from typing import Any

from dashboards.mixin.config import JOB, SEL, m
from dashboards.mixin.grafana import Layout, override, panel, target, thresholds, timeseries, vm_link
from dashboards.mixin.mappings import DURATION_MAPPINGS, IMPACT_COLOURS, IMPACT_TEXT_MAPPINGS
from dashboards.mixin.panels import event_timeline
from dashboards.mixin.recording import JOB_VMS_PENDING


def events_row(lay: Layout) -> None:
    lay.row("Events")
    lay.add(upcoming_impact(), 24, 5)
    lay.add(
        panel(
            "table",
            "Current events",
            "Every event listed right now, per VM that sees it (all VMs of an availability set or scale set "
            "see the same event; affects_this_vm tells whether it is in the VM's Resources). Joins event_info "
            "with the per-event gauges. 'NotBefore in' is empty once Started; 'Duration' is DurationInSeconds "
            "as announced by Azure (-1: unknown, 0: no impact); 'Approved at' is when this exporter's approval was "
            "accepted (Azure may still wait for NotBefore or the host's other tenants). Click an instance for its "
            "VM detail.",
            [
                target(
                    f"max by (job, instance, event_id, event_type, event_status, event_source, resource_type, "
                    f"affects_this_vm, impact, cause) ({m('event_info')}{{{SEL}}})",
                    instant=True,
                    fmt="table",
                ),
                target(
                    f"max by (job, instance, event_id) ({m('event_seconds_until_not_before')}{{{SEL}}})",
                    instant=True,
                    fmt="table",
                ),
                target(
                    f"max by (job, instance, event_id) ({m('event_started_seconds')}{{{SEL}}})",
                    instant=True,
                    fmt="table",
                ),
                target(
                    f"max by (job, instance, event_id) ({m('event_duration_seconds')}{{{SEL}}})",
                    instant=True,
                    fmt="table",
                ),
                target(
                    f"max by (job, instance, event_id) ({m('event_approved_timestamp_seconds')}{{{SEL}}}) * 1000",
                    instant=True,
                    fmt="table",
                ),
            ],
            "none",
            defaults={"custom": {"align": "auto", "cellOptions": {"type": "auto"}, "filterable": True}},
            options={
                "showHeader": True,
                "cellHeight": "sm",
                "footer": {"show": False, "reducer": ["sum"], "fields": ""},
                "sortBy": [{"displayName": "NotBefore in", "desc": False}],
            },
            transformations=[
                {"id": "merge", "options": {}},
                {
                    "id": "organize",
                    "options": {
                        "excludeByName": {"Time": True, "Value #A": True},
                        "indexByName": {
                            "instance": 0,
                            "impact": 1,
                            "event_type": 2,
                            "event_status": 3,
                            "Value #B": 4,
                            "Value #C": 5,
                            "Value #D": 6,
                            "Value #E": 7,
                            "cause": 8,
                            "event_source": 9,
                            "affects_this_vm": 10,
                            "resource_type": 11,
                            "event_id": 12,
                            "job": 13,
                        },
                        "renameByName": {
                            "Value #B": "NotBefore in",
                            "Value #C": "Time in Started",
                            "Value #D": "Duration",
                            "Value #E": "Approved at",
                            "impact": "Impact",
                            "cause": "Cause",
                            "event_type": "Type",
                            "event_status": "Status",
                            "event_source": "Source",
                            "affects_this_vm": "Affects this VM",
                            "resource_type": "Resource type",
                            "event_id": "Event ID",
                        },
                    },
                },
            ],
            overrides=[
                override("instance", links=vm_link()),
                override(
                    "NotBefore in",
                    unit="s",
                    thresholds=thresholds((None, "red"), (300, "orange"), (900, "transparent")),
                    **{"custom.cellOptions": {"type": "color-text"}},
                ),
                override(
                    "Time in Started",
                    unit="s",
                    thresholds=thresholds((None, "transparent"), (600, "red")),
                    **{"custom.cellOptions": {"type": "color-text"}},
                ),
                override("Duration", unit="s", mappings=DURATION_MAPPINGS),
                override("Approved at", unit="dateTimeAsIso"),
                override("Impact", mappings=IMPACT_TEXT_MAPPINGS, **{"custom.cellOptions": {"type": "color-text"}}),
                override(
                    "Status",
                    mappings=[
                        {
                            "type": "value",
                            "options": {
                                "Scheduled": {"color": "yellow", "index": 0},
                                "Started": {"color": "red", "index": 1},
                            },
                        }
                    ],
                    **{"custom.cellOptions": {"type": "color-text"}},
                ),
            ],
        ),
        24,
        9,
    )
    lay.add(
        timeseries(
            "VMs with pending events by type and status",
            "Number of VMs that list at least one event of each type and status "
            "(azure_scheduled_events_pending > 0). Events of an availability set or scale set are listed on "
            "every member VM. From the recording rule " + JOB_VMS_PENDING + ": the selected jobs, every instance.",
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
            "Each listed event per VM over time: yellow Scheduled, red Started; a gap means not listed "
            "(not yet announced, completed or cancelled).",
        ),
        24,
        8,
    )


def upcoming_impact() -> dict[str, Any]:
    """How many VMs each impact will hit: the fleet's maintenance in one glance."""
    return panel(
        "bargauge",
        "Upcoming impact by kind",
        "VMs with a listed event for themselves (affects_this_vm true or unknown), by what the event will do: "
        "live_migration and pause only pause the VM for seconds; reboot loses memory; redeploy also loses the "
        "temporary disk; eviction (Spot) and termination remove the VM. An event listing several VMs counts "
        "once per VM. See the runbook for what each impact means for the workload.",
        [
            target(
                f'count by (impact) ({m("event_info")}{{{SEL}, affects_this_vm!="false"}})',
                "{{impact}}",
                instant=True,
            )
        ],
        "short",
        defaults={
            "color": {"mode": "thresholds"},
            "thresholds": {"mode": "absolute", "steps": [{"color": "text", "value": None}]},
            "min": 0,
        },
        options={
            "orientation": "vertical",
            "displayMode": "basic",
            "showUnfilled": True,
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
        },
        overrides=[
            override(impact, color={"mode": "fixed", "fixedColor": colour}) for impact, colour in IMPACT_COLOURS
        ],
    )
