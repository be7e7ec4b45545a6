"""Grafana building blocks: panels, layout, variables and the dashboard frame."""

from __future__ import annotations

from typing import Any

from dashboards.mixin.config import DS, SEL, TAGS, VM_UID, m


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


def panel(
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
    return panel(
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
    return panel(
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
    return panel(
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
# One series per event, valued by impact (se_exporter.imds.impact), for a timeline coloured by what it does.
IMPACT_COLOURS = (
    ("live_migration", "green"), ("pause", "blue"), ("reboot", "orange"), ("redeploy", "dark-orange"),
    ("eviction", "red"), ("termination", "dark-red"), ("unknown", "purple"),
)
IMPACT_STATE_EXPR = "max by (instance, event_type, event_id) (\n" + "\n".join(
    f'  {"or " if index > 1 else "   "}{m("event_info")}{{{SEL}, impact="{impact}"}} * {index}'
    for index, (impact, _) in enumerate(IMPACT_COLOURS, start=1)
) + "\n)"
IMPACT_MAPPINGS = [
    {
        "type": "value",
        "options": {
            str(index): {"text": impact, "color": colour, "index": index - 1}
            for index, (impact, colour) in enumerate(IMPACT_COLOURS, start=1)
        },
    }
]
IMPACT_TEXT_MAPPINGS = [
    {"type": "value", "options": {impact: {"color": colour, "index": index} for index, (impact, colour)
                                  in enumerate(IMPACT_COLOURS)}}
]
DURATION_MAPPINGS = [{"type": "value", "options": {"-1": {"text": "unknown", "index": 0}}}]


def up_expr(job_selector: str) -> str:
    return f"up{{{job_selector}, {SEL}}}"


# --------------------------------------------------------------------------------------------
# Fleet overview
# --------------------------------------------------------------------------------------------
