"""Grafana building blocks: targets, thresholds, the layout grid and the panel kinds we use."""

from __future__ import annotations

from typing import Any

from dashboards.mixin.config import DS, VM_UID


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
    overrides: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """``unit`` is the left axis'; a query of another unit goes on the right axis (``right_axis``)."""
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
        overrides=overrides,
    )


def right_axis(ref_id: str, unit: str) -> dict[str, Any]:
    """The series of query ``ref_id`` on the right axis, in ``unit``: one unit per axis."""
    return {
        "matcher": {"id": "byFrameRefID", "options": ref_id},
        "properties": [{"id": "unit", "value": unit}, {"id": "custom.axisPlacement", "value": "right"}],
    }


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
