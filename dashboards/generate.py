#!/usr/bin/env python3
"""Generate se-exporter's Grafana dashboards and Prometheus rules.

One source for every query, so panels and alerts stay consistent, and one place for the only
job selector the project needs (``--job-selector``: the exporter's own metrics are identified by
their ``azure_scheduled_events_`` prefix; only Prometheus' synthetic ``up`` series needs a job).

Writes:

* ``dashboards/fleet-overview.json`` and ``dashboards/vm-detail.json`` (Grafana, schemaVersion 39)
* ``alerts/se-exporter.rules.yml`` (Prometheus recording and alerting rules)

Usage::

    python dashboards/generate.py                 # rewrite the files
    python dashboards/generate.py --check         # exit 1 if a committed file is out of date
    python dashboards/generate.py --job-selector 'job="azure-se"' --output-dir /tmp/out

The committed files are generated with the defaults below; ``tests/test_dashboards_static.py``
fails when they are out of date. Edit this script, never the generated files.
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent

# Matches the job of every se-exporter scrape config or PodMonitor/ServiceMonitor we ship and
# the common "<namespace>/se-exporter" job names of the Prometheus Operator.
DEFAULT_JOB_SELECTOR = 'job=~".*se-exporter.*"'
RUNBOOK_BASE = "https://github.com/se-exporter/se-exporter/blob/main/alerts/runbook.md"

PREFIX = "azure_scheduled_events_"
IMPACTFUL = "Reboot|Redeploy|Preempt|Terminate"

FLEET_UID = "se-exporter-fleet"
VM_UID = "se-exporter-vm"
TAGS = ["se-exporter", "azure", "scheduled-events"]

DS = {"type": "prometheus", "uid": "${datasource}"}
SEL = 'job=~"$job", instance=~"$instance"'


def m(name: str) -> str:
    return PREFIX + name


# --------------------------------------------------------------------------------------------
# Grafana building blocks
# --------------------------------------------------------------------------------------------


def target(
    expr: str,
    legend: str = "",
    *,
    ref: str = "A",
    instant: bool = False,
    fmt: str = "time_series",
) -> dict[str, Any]:
    return {
        "datasource": DS,
        "editorMode": "code",
        "expr": expr,
        "format": fmt,
        "instant": instant,
        "legendFormat": legend or "__auto",
        "range": not instant,
        "refId": ref,
    }


def thresholds(*steps: tuple[float | None, str]) -> dict[str, Any]:
    return {"mode": "absolute", "steps": [{"color": c, "value": v} for v, c in steps]}


GREEN = thresholds((None, "green"))


class Layout:
    """Places panels left to right on Grafana's 24-column grid."""

    def __init__(self) -> None:
        self.panels: list[dict[str, Any]] = []
        self.x = 0
        self.y = 0
        self.row_h = 0
        self.next_id = 1

    def _newline(self) -> None:
        self.y += self.row_h
        self.x = 0
        self.row_h = 0

    def row(self, title: str) -> None:
        if self.x:
            self._newline()
        self.panels.append(
            {
                "type": "row",
                "id": self.next_id,
                "title": title,
                "collapsed": False,
                "gridPos": {"h": 1, "w": 24, "x": 0, "y": self.y},
                "panels": [],
            }
        )
        self.next_id += 1
        self.y += 1

    def add(self, panel: dict[str, Any], w: int, h: int) -> None:
        if self.x + w > 24:
            self._newline()
        panel["id"] = self.next_id
        panel["gridPos"] = {"h": h, "w": w, "x": self.x, "y": self.y}
        self.next_id += 1
        self.x += w
        self.row_h = max(self.row_h, h)
        self.panels.append(panel)


def _panel(
    kind: str,
    title: str,
    description: str,
    targets: list[dict[str, Any]],
    unit: str,
    *,
    defaults: dict[str, Any] | None = None,
    options: dict[str, Any] | None = None,
    overrides: list[dict[str, Any]] | None = None,
    transformations: list[dict[str, Any]] | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    refs = "ABCDEFGHIJ"
    for i, t in enumerate(targets):
        t["refId"] = refs[i]
    panel: dict[str, Any] = {
        "type": kind,
        "title": title,
        "description": description,
        "datasource": DS,
        "targets": targets,
        "fieldConfig": {
            "defaults": {"unit": unit, **(defaults or {})},
            "overrides": overrides or [],
        },
        "options": options or {},
    }
    if transformations:
        panel["transformations"] = transformations
    panel.update(extra or {})
    return panel


def stat(
    title: str,
    description: str,
    expr: str,
    unit: str,
    *,
    steps: dict[str, Any] = GREEN,
    no_value: str | None = None,
    mappings: list[dict[str, Any]] | None = None,
    decimals: int | None = None,
) -> dict[str, Any]:
    defaults: dict[str, Any] = {"color": {"mode": "thresholds"}, "thresholds": steps, "mappings": mappings or []}
    if no_value is not None:
        defaults["noValue"] = no_value
    if decimals is not None:
        defaults["decimals"] = decimals
    return _panel(
        "stat",
        title,
        description,
        [target(expr, instant=True)],
        unit,
        defaults=defaults,
        options={
            "colorMode": "background",
            "graphMode": "none",
            "justifyMode": "auto",
            "orientation": "auto",
            "textMode": "auto",
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
        },
    )


def timeseries(
    title: str,
    description: str,
    targets: list[dict[str, Any]],
    unit: str,
    *,
    bars: bool = False,
    stacked: bool = False,
    steps: dict[str, Any] | None = None,
    min_zero: bool = True,
    decimals: int | None = None,
    line_interpolation: str = "linear",
) -> dict[str, Any]:
    custom: dict[str, Any] = {
        "drawStyle": "bars" if bars else "line",
        "fillOpacity": 60 if bars else 10,
        "lineWidth": 1,
        "lineInterpolation": line_interpolation,
        "pointSize": 4,
        "showPoints": "never",
        "spanNulls": False,
        "stacking": {"group": "A", "mode": "normal" if stacked else "none"},
        "thresholdsStyle": {"mode": "dashed" if steps else "off"},
    }
    defaults: dict[str, Any] = {
        "color": {"mode": "palette-classic"},
        "custom": custom,
        "thresholds": steps or GREEN,
    }
    if min_zero:
        defaults["min"] = 0
    if decimals is not None:
        defaults["decimals"] = decimals
    return _panel(
        "timeseries",
        title,
        description,
        targets,
        unit,
        defaults=defaults,
        options={
            "legend": {
                "calcs": ["lastNotNull", "max"],
                "displayMode": "table",
                "placement": "right",
                "showLegend": True,
            },
            "tooltip": {"mode": "multi", "sort": "desc"},
        },
    )


def bargauge(title: str, description: str, targets: list[dict[str, Any]], unit: str) -> dict[str, Any]:
    return _panel(
        "bargauge",
        title,
        description,
        targets,
        unit,
        defaults={"color": {"mode": "continuous-BlPu"}, "min": 0, "thresholds": GREEN},
        options={
            "displayMode": "gradient",
            "orientation": "horizontal",
            "showUnfilled": True,
            "valueMode": "color",
            "namePlacement": "auto",
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
        },
    )


def override(name: str, **props: Any) -> dict[str, Any]:
    return {
        "matcher": {"id": "byName", "options": name},
        "properties": [{"id": k, "value": v} for k, v in props.items()],
    }


def vm_link(title: str = "VM detail") -> list[dict[str, Any]]:
    return [
        {
            "title": title,
            "url": f"/d/{VM_UID}/azure-scheduled-events-vm-detail?var-datasource=${{datasource}}"
            "&var-job=${__data.fields.job}&var-instance=${__data.fields.instance}&${__url_time_range}",
        }
    ]


def variables(instance_all_default: bool) -> list[dict[str, Any]]:
    def query_var(name: str, label: str, query: str, current: dict[str, Any]) -> dict[str, Any]:
        return {
            "name": name,
            "label": label,
            "type": "query",
            "datasource": DS,
            "definition": query,
            "query": query,
            "refresh": 2,
            "regex": "",
            "sort": 1,
            "multi": True,
            "includeAll": True,
            "allValue": ".+",
            "current": current,
            "options": [],
            "hide": 0,
        }

    all_current = {"selected": True, "text": ["All"], "value": ["$__all"]}
    return [
        {
            "name": "datasource",
            "label": "Data source",
            "type": "datasource",
            "query": "prometheus",
            "regex": "",
            "refresh": 1,
            "multi": False,
            "includeAll": False,
            "current": {},
            "options": [],
            "hide": 0,
        },
        query_var("job", "Job", f"label_values({m('exporter_build_info')}, job)", all_current),
        query_var(
            "instance",
            "Instance",
            f'label_values({m("exporter_build_info")}{{job=~"$job"}}, instance)',
            all_current if instance_all_default else {},
        ),
    ]


def dashboard(uid: str, title: str, description: str, layout: Layout, instance_all_default: bool) -> dict[str, Any]:
    return {
        "uid": uid,
        "title": title,
        "description": description,
        "tags": TAGS,
        "editable": True,
        "fiscalYearStartMonth": 0,
        "graphTooltip": 1,
        "liveNow": False,
        "refresh": "30s",
        "schemaVersion": 39,
        "version": 1,
        "time": {"from": "now-6h", "to": "now"},
        "timepicker": {},
        "timezone": "",
        "weekStart": "",
        "links": [
            {
                "title": "se-exporter dashboards",
                "type": "dashboards",
                "tags": ["se-exporter"],
                "asDropdown": True,
                "includeVars": True,
                "keepTime": True,
                "icon": "external link",
                "targetBlank": False,
                "tooltip": "",
                "url": "",
            }
        ],
        "annotations": {
            "list": [
                {
                    "builtIn": 1,
                    "datasource": {"type": "grafana", "uid": "-- Grafana --"},
                    "enable": True,
                    "hide": True,
                    "iconColor": "rgba(0, 211, 255, 1)",
                    "name": "Annotations & Alerts",
                    "type": "dashboard",
                }
            ]
        },
        "templating": {"list": variables(instance_all_default)},
        "panels": layout.panels,
    }


STATUS_MAPPINGS = [
    {
        "type": "value",
        "options": {
            "1": {"text": "Scheduled", "color": "yellow", "index": 0},
            "2": {"text": "Started", "color": "red", "index": 1},
            "3": {"text": "Other status", "color": "purple", "index": 2},
        },
    }
]
# One series per event and instance, valued by status, for state timelines.
EVENT_STATE_EXPR = (
    f"max by (instance, event_type, event_id) (\n"
    f'    {m("event_info")}{{{SEL}, event_status="Scheduled"}}\n'
    f'  or {m("event_info")}{{{SEL}, event_status="Started"}} * 2\n'
    f'  or {m("event_info")}{{{SEL}, event_status!~"Scheduled|Started"}} * 3\n'
    f")"
)
DURATION_MAPPINGS = [{"type": "value", "options": {"-1": {"text": "unknown", "index": 0}}}]


def up_expr(job_selector: str) -> str:
    return f"up{{{job_selector}, {SEL}}}"


# --------------------------------------------------------------------------------------------
# Fleet overview
# --------------------------------------------------------------------------------------------


# Panels both dashboards show: the same query and look, each with its own description.
def event_timeline(description: str) -> dict[str, Any]:
    return _panel(
        "state-timeline",
        "Event timeline",
        description,
        [target(EVENT_STATE_EXPR, "{{instance}} {{event_type}} {{event_id}}")],
        "none",
        defaults={
            "color": {"mode": "thresholds"},
            "thresholds": GREEN,
            "mappings": STATUS_MAPPINGS,
            "custom": {"fillOpacity": 80, "lineWidth": 0},
        },
        options={
            "alignValue": "left",
            "mergeValues": True,
            "rowHeight": 0.8,
            "showValue": "auto",
            "legend": {"displayMode": "list", "placement": "bottom", "showLegend": False},
            "tooltip": {"mode": "single", "sort": "none"},
        },
    )


def soonest_not_before(description: str) -> dict[str, Any]:
    return stat(
        "Soonest NotBefore",
        description,
        f"min({m('event_seconds_until_not_before')}{{{SEL}}})",
        "s",
        steps=thresholds((None, "red"), (300, "orange"), (900, "green")),
        no_value="none scheduled",
    )


def approvals_by_result(description: str) -> dict[str, Any]:
    return timeseries(
        "Approvals by result",
        description,
        [
            target(
                f"sum by (event_type, result) (increase({m('approvals_total')}{{{SEL}}}[$__rate_interval]))",
                "{{event_type}} {{result}}",
            )
        ],
        "short",
        bars=True,
        stacked=True,
    )


def poll_errors_by_reason(description: str) -> dict[str, Any]:
    return timeseries(
        "Poll errors by reason",
        description,
        [target(f"sum by (reason) (rate({m('poll_errors_total')}{{{SEL}}}[$__rate_interval]))", "{{reason}}")],
        "ops",
        stacked=True,
    )


def fleet_overview(job_selector: str) -> dict[str, Any]:
    lay = Layout()
    impactful_info = f'{m("event_info")}{{{SEL}, event_type=~"{IMPACTFUL}", affects_this_vm!="false"}}'

    lay.row("Now")
    lay.add(
        stat(
            "VMs with impactful events",
            "Number of VMs (instances) with a Reboot, Redeploy, Preempt or Terminate event listed for "
            "themselves (affects_this_vm is true or unknown), Scheduled or Started.",
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
    lay.add(
        _panel(
            "table",
            "Current events",
            "Every event listed right now, per VM that sees it (all VMs of an availability set or scale set "
            "see the same event; affects_this_vm tells whether it is in the VM's Resources). Joins event_info "
            "with the per-event gauges. 'NotBefore in' is empty once Started; 'Duration' is DurationInSeconds "
            "as announced by Azure (-1: unknown, 0: no impact). Click an instance for its VM detail.",
            [
                target(
                    f"max by (job, instance, event_id, event_type, event_status, event_source, resource_type, "
                    f"affects_this_vm) ({m('event_info')}{{{SEL}}})",
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
                            "event_type": 1,
                            "event_status": 2,
                            "Value #B": 3,
                            "Value #C": 4,
                            "Value #D": 5,
                            "event_source": 6,
                            "affects_this_vm": 7,
                            "resource_type": 8,
                            "event_id": 9,
                            "job": 10,
                        },
                        "renameByName": {
                            "Value #B": "NotBefore in",
                            "Value #C": "Time in Started",
                            "Value #D": "Duration",
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
            "every member VM.",
            [
                target(
                    f"count by (event_type, event_status) ({m('pending')}{{{SEL}}} > 0)",
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
            "Event lifecycle transitions (scheduled, started, completed, cancelled, rescheduled) counted over "
            "$__rate_interval windows. Each VM that lists an event counts its transitions.",
            [
                target(
                    f"sum by (event_type, transition) (increase({m('transitions_total')}{{{SEL}}}[$__rate_interval]))",
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
            "Approvals that failed or whose hook failed during the dashboard's time range.",
            f'sum(increase({m("approvals_total")}{{{SEL}, result=~"failed|hook_failed"}}[$__range])) or vector(0)',
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
            "invalid_document), summed over the selected exporters.",
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
            "Per exporter: time() - azure_scheduled_events_last_successful_poll_timestamp_seconds. A line "
            "stops when the exporter is no longer scraped; see 'Targets down'. Dashed line: alert threshold.",
            [
                target(
                    f"time() - {m('last_successful_poll_timestamp_seconds')}{{{SEL}}}",
                    "{{instance}}",
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
            "OTLP transition-log spool: records waiting to be sent (depth) and records dropped per second "
            "(lost: the audit trail has gaps).",
            [
                target(f"sum by (instance) ({m('log_spool_depth')}{{{SEL}}})", "{{instance}} depth"),
                target(
                    f"sum by (instance) (rate({m('log_spool_dropped_total')}{{{SEL}}}[$__rate_interval]))",
                    "{{instance}} dropped/s",
                ),
            ],
            "short",
        ),
        8,
        8,
    )
    lay.add(
        _panel(
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
        _panel(
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


# --------------------------------------------------------------------------------------------
# VM detail
# --------------------------------------------------------------------------------------------


def vm_detail(job_selector: str) -> dict[str, Any]:
    lay = Layout()
    lay.row("Now")
    lay.add(
        stat(
            "IMDS",
            "Whether the exporter's last IMDS Scheduled Events poll succeeded.",
            f"min({m('imds_up')}{{{SEL}}})",
            "none",
            steps=thresholds((None, "red"), (1, "green")),
            mappings=[{"type": "value", "options": {"0": {"text": "DOWN"}, "1": {"text": "UP"}}}],
            no_value="exporter not reporting",
        ),
        4,
        4,
    )
    lay.add(
        stat(
            "Listed events",
            "Events IMDS lists for this VM right now (all types and statuses, including events for other "
            "VMs of the same availability set or scale set).",
            f"sum({m('pending')}{{{SEL}}})",
            "short",
            steps=thresholds((None, "green"), (1, "orange")),
            decimals=0,
        ),
        4,
        4,
    )
    lay.add(
        soonest_not_before(
            "Time until the earliest NotBefore of the listed events (negative: passed, not yet Started).",
        ),
        4,
        4,
    )
    lay.add(
        stat(
            "Longest in Started",
            "Time the longest-running Started event has spent in Started so far. The documented maintenance "
            "window is about 10 minutes.",
            f"max({m('event_started_seconds')}{{{SEL}}})",
            "s",
            steps=thresholds((None, "orange"), (600, "red")),
            no_value="none started",
        ),
        4,
        4,
    )
    lay.add(
        stat(
            "Since last good poll",
            "time() - azure_scheduled_events_last_successful_poll_timestamp_seconds.",
            f"max(time() - {m('last_successful_poll_timestamp_seconds')}{{{SEL}}})",
            "s",
            steps=thresholds((None, "green"), (60, "orange"), (300, "red")),
        ),
        4,
        4,
    )
    lay.add(
        stat(
            "Scrape",
            "Prometheus' up metric for this exporter.",
            f"min({up_expr(job_selector)})",
            "none",
            steps=thresholds((None, "red"), (1, "green")),
            mappings=[{"type": "value", "options": {"0": {"text": "DOWN"}, "1": {"text": "UP"}}}],
            no_value="no target",
        ),
        4,
        4,
    )

    lay.row("Events")
    lay.add(
        event_timeline(
            "State of each event over time: yellow Scheduled, red Started; a gap means not listed (not yet "
            "announced, completed or cancelled). Row label: instance, type, event ID.",
        ),
        24,
        7,
    )
    lay.add(
        timeseries(
            "Time until NotBefore",
            "NotBefore minus now for each Scheduled event (negative once passed). Dashed line: 5 minutes.",
            [
                target(
                    f"{m('event_seconds_until_not_before')}{{{SEL}}}",
                    "{{instance}} {{event_type}} {{event_id}}",
                )
            ],
            "s",
            steps=thresholds((None, "red"), (300, "green")),
            min_zero=False,
        ),
        12,
        8,
    )
    lay.add(
        timeseries(
            "Time in Started",
            "Time each Started event has spent in Started so far. Dashed line: 10 minutes, the documented window.",
            [
                target(
                    f"{m('event_started_seconds')}{{{SEL}}}",
                    "{{instance}} {{event_type}} {{event_id}}",
                )
            ],
            "s",
            steps=thresholds((None, "green"), (600, "red")),
        ),
        12,
        8,
    )
    lay.add(
        timeseries(
            "DocumentIncarnation",
            "IMDS DocumentIncarnation: increases on every change of the event document; may reset after "
            "24 hours without requests.",
            [target(f"{m('document_incarnation')}{{{SEL}}}", "{{instance}}")],
            "none",
            decimals=0,
            min_zero=False,
            line_interpolation="stepAfter",
        ),
        12,
        8,
    )
    lay.add(
        timeseries(
            "Transitions",
            "Lifecycle transitions of this VM's events over $__rate_interval windows.",
            [
                target(
                    f"sum by (instance, event_type, transition) "
                    f"(increase({m('transitions_total')}{{{SEL}}}[$__rate_interval]))",
                    "{{instance}} {{event_type}} {{transition}}",
                )
            ],
            "short",
            bars=True,
            stacked=True,
        ),
        12,
        8,
    )

    lay.row("Notice and time in Started (completed events)")
    lay.add(
        bargauge(
            "Notice received (time range)",
            "Distribution of the notice given (NotBefore minus first sighting) for events first seen "
            "Scheduled during the dashboard's time range, by histogram bucket (upper bound).",
            [
                target(
                    f"sum by (le) (increase({m('notice_seconds_bucket')}{{{SEL}}}[$__range]))",
                    "{{le}}",
                    instant=True,
                    fmt="heatmap",
                )
            ],
            "short",
        ),
        8,
        8,
    )
    lay.add(
        bargauge(
            "Mean notice by event type (time range)",
            "Average notice (NotBefore minus first sighting) per event type during the time range.",
            [
                target(
                    f"sum by (event_type) (increase({m('notice_seconds_sum')}{{{SEL}}}[$__range]))\n"
                    f"/ sum by (event_type) (increase({m('notice_seconds_count')}{{{SEL}}}[$__range]))",
                    "{{event_type}}",
                    instant=True,
                )
            ],
            "s",
        ),
        8,
        8,
    )
    lay.add(
        bargauge(
            "Time in Started, p90 by event type (time range)",
            "90th percentile of the total time completed events spent in Started, per event type, during "
            "the time range (histogram estimate). Above 600 s is longer than the documented window.",
            [
                target(
                    f"histogram_quantile(0.9, sum by (le, event_type) "
                    f"(increase({m('started_duration_seconds_bucket')}{{{SEL}}}[$__range])))",
                    "{{event_type}}",
                    instant=True,
                )
            ],
            "s",
        ),
        8,
        8,
    )
    lay.add(
        timeseries(
            "Completed events: mean time in Started",
            "Mean time in Started of the events that completed within each $__rate_interval window.",
            [
                target(
                    f"sum by (event_type) (increase({m('started_duration_seconds_sum')}{{{SEL}}}[$__rate_interval]))\n"
                    f"/ sum by (event_type) (increase({m('started_duration_seconds_count')}{{{SEL}}}"
                    f"[$__rate_interval]))",
                    "{{event_type}}",
                )
            ],
            "s",
            bars=True,
        ),
        12,
        8,
    )
    lay.add(
        approvals_by_result(
            "Approval decisions for this VM's events over $__rate_interval windows (approved, dry_run, failed, "
            "hook_failed).",
        ),
        12,
        8,
    )

    lay.row("IMDS")
    lay.add(
        timeseries(
            "IMDS request latency",
            "IMDS request latency quantiles by method (histogram estimates over $__rate_interval).",
            [
                target(
                    f"histogram_quantile({q}, sum by (le, method) "
                    f"(rate({m('imds_request_duration_seconds_bucket')}{{{SEL}}}[$__rate_interval])))",
                    f"p{int(q * 100)} {{{{method}}}}",
                )
                for q in (0.5, 0.9, 0.99)
            ],
            "s",
        ),
        12,
        8,
    )
    lay.add(
        timeseries(
            "IMDS requests by code",
            "IMDS requests per second by method and HTTP code ('error': no HTTP response). 410 and 429 are "
            "retried; 400 is a bug (missing Metadata header or malformed approval).",
            [
                target(
                    f"sum by (method, code) (rate({m('imds_requests_total')}{{{SEL}}}[$__rate_interval]))",
                    "{{method}} {{code}}",
                )
            ],
            "reqps",
            stacked=True,
        ),
        12,
        8,
    )
    lay.add(
        poll_errors_by_reason(
            "Failed polls per second by reason.",
        ),
        12,
        8,
    )
    lay.add(
        timeseries(
            "IMDS up and poll freshness",
            "imds_up (1: last poll succeeded) and the time since the last successful poll (right axis).",
            [
                target(f"{m('imds_up')}{{{SEL}}}", "{{instance}} imds_up"),
                target(
                    f"time() - {m('last_successful_poll_timestamp_seconds')}{{{SEL}}}",
                    "{{instance}} since last good poll",
                ),
            ],
            "none",
        )
        | {
            "fieldConfig": {
                "defaults": {
                    "unit": "none",
                    "min": 0,
                    "color": {"mode": "palette-classic"},
                    "thresholds": GREEN,
                    "custom": {
                        "drawStyle": "line",
                        "fillOpacity": 10,
                        "lineWidth": 1,
                        "showPoints": "never",
                        "spanNulls": False,
                    },
                },
                "overrides": [
                    {
                        "matcher": {"id": "byFrameRefID", "options": "B"},
                        "properties": [
                            {"id": "unit", "value": "s"},
                            {"id": "custom.axisPlacement", "value": "right"},
                        ],
                    }
                ],
            }
        },
        12,
        8,
    )
    return dashboard(
        VM_UID,
        "Azure Scheduled Events / VM detail",
        "One VM's Azure maintenance events over time, the notice it got, and its exporter's IMDS health.",
        lay,
        instance_all_default=False,
    )


# --------------------------------------------------------------------------------------------
# Prometheus rules
# --------------------------------------------------------------------------------------------

EXPORTER_UP = "instance:azure_scheduled_events_exporter_up:max"
POLL_ERRORS_RATE = "instance:azure_scheduled_events_poll_errors:rate5m"
POLL_ERRORS_RATIO = "instance:azure_scheduled_events_poll_errors:ratio_rate5m"
APPROVALS_FAILED = "instance_event_type:azure_scheduled_events_approvals_failed:increase15m"
SPOOL_DROPPED = "instance:azure_scheduled_events_log_spool_dropped:increase15m"

INFO_LABELS = "event_status, event_source, resource_type, affects_this_vm"
EVENT_MATCH = "on (job, instance, event_id)"
SCHEDULED = 'event_status="Scheduled"'
STARTED = 'event_status="Started"'
IMPACTFUL_TYPES = f'event_type=~"{IMPACTFUL}"'
REDEPLOY = 'event_type="Redeploy"'
NOT_FREEZE = 'event_type!="Freeze"'
NOT_USER = 'event_source!="User"'
# Events for this VM; "unknown" (the exporter could not learn the VM name) counts as this VM.
THIS_VM = 'affects_this_vm!="false"'


def robust_increase(metric: str, selector: str, by: str) -> str:
    """increase() over 15m that also counts a counter series born after its first increment.

    A labelled counter that the exporter creates on first use appears with value 1; increase()
    would report 0 for it. Series that already existed 15 minutes ago use increase(); younger
    series count their whole value, but only on exporters that were already scraped 15 minutes
    ago (a newly discovered target's old counts are not news).
    """
    sel = f"{metric}{{{selector}}}" if selector else metric
    return (
        f"sum by ({by}) (\n"
        f"    (increase({sel}[15m]) and {sel} offset 15m)\n"
        f"  or\n"
        f"    (\n"
        f"      ({sel} unless {sel} offset 15m)\n"
        f"      and on (job, instance) {m('exporter_build_info')} offset 15m\n"
        f"    )\n"
        f")"
    )


def recording_rules(job_selector: str) -> list[dict[str, Any]]:
    return [
        {
            # The only place a job selector is needed: Prometheus' synthetic up series.
            "record": EXPORTER_UP,
            "expr": f"max by (job, instance) (up{{{job_selector}}})",
        },
        {
            "record": POLL_ERRORS_RATE,
            "expr": f"sum by (job, instance) (rate({m('poll_errors_total')}[5m]))",
        },
        {
            "record": POLL_ERRORS_RATIO,
            "expr": (
                f"{POLL_ERRORS_RATE}\n"
                f"/\n"
                f"(\n"
                f"    {POLL_ERRORS_RATE}\n"
                f"  + sum by (job, instance) "
                f'(rate({m("imds_requests_total")}{{method="GET", code=~"2.."}}[5m]))\n'
                f")"
            ),
        },
        {
            "record": APPROVALS_FAILED,
            "expr": robust_increase(
                m("approvals_total"), 'result=~"failed|hook_failed"', "job, instance, event_type, result"
            ),
        },
        {
            "record": SPOOL_DROPPED,
            "expr": robust_increase(m("log_spool_dropped_total"), "", "job, instance"),
        },
    ]


def anchor(alertname: str) -> str:
    """The anchor GitHub generates for a Markdown heading made of the alert name."""
    return alertname.lower()


def alert(  # noqa: PLR0917 - reads like the rule it builds
    name: str,
    expr: str,
    for_: str,
    severity: str,
    summary: str,
    description: str,
) -> dict[str, Any]:
    return {
        "alert": name,
        "expr": expr,
        "for": for_,
        "labels": {"severity": severity},
        "annotations": {
            "summary": summary,
            "description": description,
            "runbook_url": f"{RUNBOOK_BASE}#{anchor(name)}",
        },
    }


def info(selectors: str) -> str:
    return f"{m('event_info')}{{{selectors}}}"


def alerting_rules(job_selector: str) -> list[dict[str, Any]]:
    impactful_scheduled = info(f"{SCHEDULED}, {IMPACTFUL_TYPES}, {THIS_VM}")
    return [
        alert(
            "AzureScheduledEventImpactfulScheduled",
            f"{m('event_seconds_until_not_before')}\n"
            f"  * {EVENT_MATCH} group_left ({INFO_LABELS})\n"
            f"    {impactful_scheduled}\n"
            f"or {EVENT_MATCH}\n"
            f"  # Should never happen (Scheduled events carry a NotBefore), but never miss the event.\n"
            f'  label_replace({impactful_scheduled}, "not_before", "unknown", "", "")',
            "0m",
            "warning",
            "An impactful Azure maintenance event is scheduled for a VM.",
            "{{ $labels.event_type }} event {{ $labels.event_id }} (source: {{ $labels.event_source }}) is "
            "scheduled for {{ $labels.instance }}; "
            "{{ if $labels.not_before }}its NotBefore is unknown{{ else }}NotBefore is in "
            "{{ $value | humanizeDuration }}{{ end }}. Drain the VM and approve the event, or let it start "
            "at NotBefore.",
        ),
        alert(
            "AzureScheduledEventNotBeforeImminent",
            f'({m("event_seconds_until_not_before")}{{event_type=~"Reboot|Redeploy|Terminate"}} < 300)\n'
            f"  * {EVENT_MATCH} group_left ({INFO_LABELS})\n"
            f"    {info(f'{SCHEDULED}, {NOT_USER}, {THIS_VM}')}",
            "0m",
            "critical",
            "Azure maintenance starts within 5 minutes and has been neither approved nor started.",
            "{{ $labels.event_type }} event {{ $labels.event_id }} on {{ $labels.instance }} can start in "
            "{{ $value | humanizeDuration }} (NotBefore; negative means already due) and is still Scheduled. "
            "Drain the VM now and approve the event, or accept the impact.",
        ),
        alert(
            "AzureScheduledEventStarted",
            f"{m('event_started_seconds')}\n"
            f"  * {EVENT_MATCH} group_left ({INFO_LABELS})\n"
            f"    {info(f'{STARTED}, {NOT_FREEZE}, {THIS_VM}')}",
            "0m",
            "info",
            "Azure maintenance is in progress on a VM.",
            "{{ $labels.event_type }} event {{ $labels.event_id }} on {{ $labels.instance }} has been Started "
            "for {{ $value | humanizeDuration }}: the VM is being (or is about to be) rebooted, redeployed, "
            "preempted or terminated.",
        ),
        alert(
            "AzureScheduledEventStartedTooLong",
            f"({m('event_started_seconds')} > 600)\n"
            f"  * {EVENT_MATCH} group_left ({INFO_LABELS})\n"
            f"    {info(f'{STARTED}, {THIS_VM}')}",
            "5m",
            "warning",
            "Azure maintenance has been in progress far longer than its documented window.",
            "{{ $labels.event_type }} event {{ $labels.event_id }} on {{ $labels.instance }} has been Started "
            "for {{ $value | humanizeDuration }}; maintenance normally completes within about 10 minutes.",
        ),
        alert(
            "AzureScheduledEventLongNoticeRedeploy",
            f'{m("event_seconds_until_not_before")}{{event_type="Redeploy"}}\n'
            f"  * {EVENT_MATCH} group_left ({INFO_LABELS})\n"
            f"    {info(f'{REDEPLOY}, {SCHEDULED}, {THIS_VM}')}\n"
            f"and {EVENT_MATCH}\n"
            f"  # Announced at least an hour ahead (normal Redeploy notice is about 10 minutes).\n"
            f'  (max_over_time({m("event_seconds_until_not_before")}{{event_type="Redeploy"}}[1d]) > 3600)',
            "5m",
            "warning",
            "Azure announced a Redeploy days ahead: the VM's host hardware is probably degraded.",
            "{{ $labels.event_type }} event {{ $labels.event_id }} on {{ $labels.instance }} was announced well "
            "ahead; NotBefore is in {{ $value | humanizeDuration }}. Redeploy the VM yourself at a convenient "
            "time (drain, then approve the event or run az vm redeploy) instead of waiting for NotBefore.",
        ),
        alert(
            "AzureScheduledEventsIMDSDown",
            f"{m('imds_up')} == 0",
            "5m",
            "warning",
            "se-exporter cannot poll the Azure Instance Metadata Service.",
            "IMDS Scheduled Events polls from {{ $labels.instance }} have been failing for more than 5 minutes "
            "(imds_up = {{ $value }}): maintenance events for this VM are not being seen.",
        ),
        alert(
            "AzureScheduledEventsIMDSPollErrors",
            f"{POLL_ERRORS_RATIO} > 0.1",
            "15m",
            "warning",
            "Many se-exporter polls of the Azure Instance Metadata Service fail.",
            "{{ $value | humanizePercentage }} of the IMDS Scheduled Events polls from {{ $labels.instance }} "
            "failed over the last 5 minutes, for 15 minutes; events may be seen late.",
        ),
        alert(
            "AzureScheduledEventsExporterDown",
            f"{EXPORTER_UP} == 0\n"
            f"# A VM being rebooted or redeployed takes its exporter down: expected for 30 minutes.\n"
            f"unless on (job, instance)\n"
            f"  max_over_time({info(f'{IMPACTFUL_TYPES}, {THIS_VM}')}[30m])",
            "5m",
            "warning",
            "Prometheus cannot scrape se-exporter.",
            "se-exporter on {{ $labels.instance }} (job {{ $labels.job }}) has been unreachable for Prometheus "
            "for more than 5 minutes (up = {{ $value }}) and the VM had no impactful maintenance event in the "
            "last 30 minutes.",
        ),
        alert(
            "AzureScheduledEventsExporterAbsent",
            f"absent({EXPORTER_UP})",
            "15m",
            "warning",
            "No se-exporter target is being scraped.",
            f"Prometheus has had no scrape target matching {{{job_selector}}} for 15 minutes: no Azure "
            "scheduled events are being monitored. Check service discovery and the exporter deployment.",
        ),
        alert(
            "AzureScheduledEventsExporterStale",
            f"time() - {m('last_successful_poll_timestamp_seconds')} > 300",
            "2m",
            "warning",
            "se-exporter has not polled IMDS successfully for a long time.",
            "The last successful IMDS poll on {{ $labels.instance }} was {{ $value | humanizeDuration }} ago: "
            "its metrics are stale and new events are not being seen.",
        ),
        alert(
            "AzureScheduledEventsApprovalFailed",
            f"{APPROVALS_FAILED} > 0",
            "0m",
            "warning",
            "se-exporter failed to approve an Azure maintenance event.",
            "{{ $value | humanize }} approval(s) of {{ $labels.event_type }} events on {{ $labels.instance }} "
            "ended with result {{ $labels.result }} in the last 15 minutes: the event was not approved and "
            "will start at its NotBefore.",
        ),
        alert(
            "AzureScheduledEventsLogSpoolDropping",
            f"{SPOOL_DROPPED} > 0",
            "0m",
            "warning",
            "se-exporter is dropping transition log records.",
            "{{ $value | humanize }} transition log records were dropped from the OTLP spool on "
            "{{ $labels.instance }} in the last 15 minutes: the OTLP receiver is unreachable or too slow and "
            "the maintenance audit trail has gaps.",
        ),
    ]


def rules(job_selector: str) -> dict[str, Any]:
    return {
        "groups": [
            {"name": "se-exporter.rules", "rules": recording_rules(job_selector)},
            {"name": "se-exporter.alerts", "rules": alerting_rules(job_selector)},
        ]
    }


# --------------------------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------------------------


class _Dumper(yaml.SafeDumper):
    pass


def _str_representer(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _str_representer)


def render_rules(job_selector: str) -> str:
    header = (
        "# Generated by dashboards/generate.py: edit the generator, then run it. Do not edit by hand.\n"
        f"# Job selector for Prometheus' up series: {job_selector}\n"
        "# Runbook: alerts/runbook.md\n"
    )
    return header + yaml.dump(rules(job_selector), Dumper=_Dumper, sort_keys=False, width=10000)


def render_json(obj: dict[str, Any]) -> str:
    return json.dumps(obj, indent=2, ensure_ascii=False) + "\n"


def outputs(job_selector: str) -> dict[str, str]:
    return {
        "dashboards/fleet-overview.json": render_json(fleet_overview(job_selector)),
        "dashboards/vm-detail.json": render_json(vm_detail(job_selector)),
        "alerts/se-exporter.rules.yml": render_rules(job_selector),
    }


def _diff(path: Path, new: str) -> Iterable[str]:
    old = path.read_text(encoding="utf-8") if path.exists() else ""
    return difflib.unified_diff(old.splitlines(True), new.splitlines(True), str(path), f"{path} (generated)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--job-selector", default=DEFAULT_JOB_SELECTOR, help="label matcher(s) for up{...}")
    parser.add_argument("--output-dir", type=Path, default=ROOT, help="repository root to write into")
    parser.add_argument("--check", action="store_true", help="only report files that are out of date")
    args = parser.parse_args(argv)

    stale = []
    for rel, text in outputs(args.job_selector).items():
        path = args.output_dir / rel
        if args.check:
            diff = list(_diff(path, text))
            if diff:
                stale.append(rel)
                sys.stdout.writelines(diff[:200])
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    if stale:
        print(f"\nout of date: {', '.join(stale)}; run: python dashboards/generate.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
