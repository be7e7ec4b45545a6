"""The dashboard frame: template variables, links, annotations around a layout of panels."""

from __future__ import annotations

from typing import Any

from dashboards.mixin.config import DS, TAGS, m
from dashboards.mixin.grafana import Layout


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
        {
            # Any label users add to their targets (cluster, region, resource_group, vmss, node): Grafana adds
            # it to every query. The job-level recording rules keep the group labels, so fleet panels filter too.
            "name": "filter",
            "label": "Filter",
            "type": "adhoc",
            "datasource": DS,
            "filters": [],
            "hide": 0,
        },
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
