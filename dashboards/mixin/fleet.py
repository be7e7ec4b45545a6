"""The fleet overview dashboard: which VMs have maintenance coming, and how the exporters fare."""

from __future__ import annotations

from typing import Any

from dashboards.mixin.config import DISRUPTIVE, FLEET_UID, JOB, SEL, m
from dashboards.mixin.grafana import (
    DURATION_MAPPINGS,
    IMPACT_COLOURS,
    IMPACT_TEXT_MAPPINGS,
    Layout,
    dashboard,
    override,
    panel,
    stat,
    target,
    thresholds,
    timeseries,
    up_expr,
    vm_link,
)
from dashboards.mixin.panels import approvals_by_result, event_timeline, poll_errors_by_reason, soonest_not_before
from dashboards.mixin.recording import JOB_POLL_AGE, JOB_TRANSITIONS, JOB_VMS_PENDING, PERSISTENCE_ERRORS


def fleet_overview(job_selector: str) -> dict[str, Any]:
    lay = Layout()
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
            "Time until the earliest NotBefore of any listed event (negative: passed, event not yet Started). "
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

    lay.row("Events")
    lay.add(upcoming_impact(), 24, 5)
    lay.add(
        panel(
            "table",
            "Current events",
            "Every event listed right now, per VM that sees it (all VMs of an availability set or scale set "
            "see the same event; affects_this_vm tells whether it is in the VM's Resources). Joins event_info "
            "with the per-event gauges. 'NotBefore in' is empty once Started; 'Duration' is DurationInSeconds "
            "as announced by Azure (-1: unknown, 0: no impact). Click an instance for its VM detail.",
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
                            "cause": 7,
                            "event_source": 8,
                            "affects_this_vm": 9,
                            "resource_type": 10,
                            "event_id": 11,
                            "job": 12,
                        },
                        "renameByName": {
                            "Value #B": "NotBefore in",
                            "Value #C": "Time in Started",
                            "Value #D": "Duration",
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

    lay.row("Lifecycle and approvals")
    lay.add(
        timeseries(
            "Transitions",
            "Event lifecycle transitions (scheduled, started, completed, cancelled, rescheduled, updated) counted over "
            "5-minute windows. Each VM that lists an event counts its transitions. From the recording rule "
            + JOB_TRANSITIONS + ": the selected jobs, every instance (VM detail shows one VM's).",
            [
                target(
                    f"sum by (event_type, transition) ({JOB_TRANSITIONS}{{{JOB}}})",
                    "{{event_type}} {{transition}}",
                )
            ],
            "short",
            bars=True,
            stacked=True,
        ),
        12,
        8,
    )
    lay.add(
        approvals_by_result(
            "Approval decisions (POST StartRequests) by result over $__rate_interval windows: approved, "
            "dry_run (decided, not sent), failed (IMDS refused or unreachable), hook_failed (the pre-approval "
            "hook, e.g. a drain, failed: the event was not approved).",
        ),
        8,
        8,
    )
    lay.add(
        stat(
            "Approval failures (time range)",
            "Approvals that failed, whose hook failed, or that NotBefore overtook (expired) during the "
            "dashboard's time range.",
            f'sum(increase({m("approvals_total")}{{{SEL}, result=~"failed|hook_failed|expired"}}[$__range]))'
            " or vector(0)",
            "short",
            steps=thresholds((None, "green"), (0.5, "red")),
            decimals=0,
        ),
        4,
        8,
    )

    lay.row("Exporter and IMDS health")
    lay.add(
        timeseries(
            "Exporters with IMDS down",
            "Number of exporters whose last IMDS poll failed (imds_up == 0), next to the number of exporters "
            "reporting.",
            [
                target(f"count({m('imds_up')}{{{SEL}}} == 0) or vector(0)", "IMDS down"),
                target(f"count({m('imds_up')}{{{SEL}}})", "exporters reporting"),
            ],
            "short",
            decimals=0,
        ),
        8,
        8,
    )
    lay.add(
        poll_errors_by_reason(
            "Failed IMDS polls per second by reason (timeout, connection, http_4xx, http_5xx, throttled, "
            "invalid_document), summed over every exporter of the selected jobs (recording rule, 5-minute "
            "rate).",
            fleet=True,
        ),
        8,
        8,
    )
    lay.add(
        timeseries(
            "IMDS requests by code",
            "IMDS HTTP requests per second by method and response code ('error': no HTTP response).",
            [
                target(
                    f"sum by (method, code) (rate({m('imds_requests_total')}{{{SEL}}}[$__rate_interval]))",
                    "{{method}} {{code}}",
                )
            ],
            "reqps",
            stacked=True,
        ),
        8,
        8,
    )
    lay.add(
        timeseries(
            "Time since last successful poll",
            "The oldest of the selected jobs' exporters: max of time() - "
            "azure_scheduled_events_last_successful_poll_timestamp_seconds (recording rule " + JOB_POLL_AGE +
            "). An exporter no longer scraped drops out; see 'Targets up / down'. Red: the alert threshold.",
            [
                target(
                    f"max by (job) ({JOB_POLL_AGE}{{{JOB}}})",
                    "{{job}}",
                )
            ],
            "s",
            steps=thresholds((None, "green"), (300, "red")),
        ),
        8,
        8,
    )
    lay.add(
        timeseries(
            "Targets up / down",
            "se-exporter scrape targets by Prometheus' up metric, per job.",
            [
                target(f"sum by (job) ({up_expr(job_selector)} == 1)", "{{job}} up"),
                target(f"count by (job) ({up_expr(job_selector)} == 0)", "{{job}} down"),
            ],
            "short",
            decimals=0,
        ),
        8,
        8,
    )
    lay.add(
        timeseries(
            "Transition-log spool",
            "OTLP transition-log spool: records waiting to be sent (depth), records dropped per second "
            "(lost: the audit trail has gaps), and the exporters whose state file or spool failed to be "
            "written in the last 15 minutes (a full or read-only disk: approvals wait meanwhile).",
            [
                target(f"sum by (instance) ({m('log_spool_depth')}{{{SEL}}})", "{{instance}} depth"),
                target(
                    f"sum by (instance) (rate({m('log_spool_dropped_total')}{{{SEL}}}[$__rate_interval]))",
                    "{{instance}} dropped/s",
                ),
                target(  # only the exporters with failed writes: the recorded 15-minute increase, above 0
                    f"sum by (instance, file) ({PERSISTENCE_ERRORS}{{{SEL}}}) > 0",
                    "{{instance}} {{file}} failed writes (15 min)",
                ),
            ],
            "short",
        ),
        8,
        8,
    )
    lay.add(
        panel(
            "table",
            "Unhealthy exporters",
            "Exporters that are down, fail to poll IMDS or have not polled successfully for over a minute, "
            "with the value of each check. Empty is good. Click an instance for its VM detail.",
            [
                target(f"{up_expr(job_selector)} == 0", instant=True, fmt="table"),
                target(f"{m('imds_up')}{{{SEL}}} == 0", instant=True, fmt="table"),
                target(
                    f"time() - {m('last_successful_poll_timestamp_seconds')}{{{SEL}}} > 60",
                    instant=True,
                    fmt="table",
                ),
            ],
            "none",
            defaults={"custom": {"align": "auto", "cellOptions": {"type": "auto"}}},
            options={"showHeader": True, "cellHeight": "sm", "footer": {"show": False, "reducer": ["sum"]}},
            transformations=[
                {"id": "merge", "options": {}},
                {
                    "id": "organize",
                    "options": {
                        "excludeByName": {"Time": True, "__name__": True},
                        "renameByName": {
                            "Value #A": "up",
                            "Value #B": "imds_up",
                            "Value #C": "Since last good poll",
                        },
                    },
                },
            ],
            overrides=[override("instance", links=vm_link()), override("Since last good poll", unit="s")],
        ),
        12,
        8,
    )
    lay.add(
        panel(
            "table",
            "Exporter versions",
            "Number of exporters per se-exporter and Python version (azure_scheduled_events_exporter_build_info).",
            [
                target(
                    f"count by (version, python_version) ({m('exporter_build_info')}{{{SEL}}})",
                    instant=True,
                    fmt="table",
                )
            ],
            "short",
            options={"showHeader": True, "cellHeight": "sm", "footer": {"show": False, "reducer": ["sum"]}},
            transformations=[
                {
                    "id": "organize",
                    "options": {"excludeByName": {"Time": True}, "renameByName": {"Value": "Exporters"}},
                }
            ],
        ),
        12,
        8,
    )
    return dashboard(
        FLEET_UID,
        "Azure Scheduled Events / Fleet overview",
        "Azure maintenance (Scheduled Events) across all VMs running se-exporter, and the exporters' health.",
        lay,
        instance_all_default=True,
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
        defaults={"color": {"mode": "thresholds"}, "thresholds": {"mode": "absolute", "steps": [
            {"color": "text", "value": None}]}, "min": 0},
        options={"orientation": "vertical", "displayMode": "basic", "showUnfilled": True,
                 "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False}},
        overrides=[override(impact, color={"mode": "fixed", "fixedColor": colour})
                   for impact, colour in IMPACT_COLOURS],
    )
