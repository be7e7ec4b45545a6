"""The dashboard frame: template variables, links, annotations around a layout of panels, and its JSON."""

from __future__ import annotations

import json

from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import dashboard as dm

from dashboards.mixin.config import TAGS, m
from dashboards.mixin.grafana import DATASOURCE, Layout

ALL = dm.VariableOption(selected=True, text=["All"], value=["$__all"])


def _query_variable(name: str, label: str, query: str, current: dm.VariableOption | None) -> db.QueryVariable:
    variable = (
        db.QueryVariable(name)
        .label(label)
        .datasource(DATASOURCE)
        .query(query)
        .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .regex("")
        .sort(dm.VariableSort.ALPHABETICAL_ASC)
        .multi(True)
        .include_all(True)
        .all_value(".+")
        .options([])
        .hide(dm.VariableHide.DONT_HIDE)
    )
    return variable.current(current) if current is not None else variable


def variables(instance_all_default: bool) -> list[db.DatasourceVariable | db.QueryVariable | db.AdHocVariable]:
    return [
        db.DatasourceVariable("datasource")
        .label("Data source")
        .type("prometheus")
        .regex("")
        .multi(False)
        .include_all(False)
        .hide(dm.VariableHide.DONT_HIDE),
        _query_variable("job", "Job", f"label_values({m('exporter_build_info')}, job)", ALL),
        _query_variable(
            "instance",
            "Instance",
            f'label_values({m("exporter_build_info")}{{job=~"$job"}}, instance)',
            ALL if instance_all_default else None,
        ),
        # Any label users add to their targets (cluster, region, resource_group, vmss, node): Grafana adds it
        # to every query. The job-level recording rules keep the group labels, so fleet panels filter too.
        db.AdHocVariable("filter").label("Filter").datasource(DATASOURCE).hide(dm.VariableHide.DONT_HIDE),
    ]


def dashboard(uid: str, title: str, description: str, layout: Layout, instance_all_default: bool) -> db.Dashboard:
    built = (
        db.Dashboard(title)
        .uid(uid)
        .description(description)
        .tags(TAGS)
        .editable()
        .tooltip(dm.DashboardCursorSync.CROSSHAIR)
        .live_now(False)
        .refresh("30s")
        .version(1)
        .time("now-6h", "now")
        .timepicker(db.TimePicker())
        .timezone("")
        .week_start("")
        .fiscal_year_start_month(0)
        .link(
            db.DashboardLink("se-exporter dashboards")
            .type(dm.DashboardLinkType.DASHBOARDS)
            .tags(["se-exporter"])
            .as_dropdown(True)
            .include_vars(True)
            .keep_time(True)
            .icon("external link")
            .target_blank(False)
            .tooltip("")
            .url("")
        )
        .annotation(
            db.AnnotationQuery()
            .built_in(1)
            .datasource(dm.DataSourceRef(type_val="grafana", uid="-- Grafana --"))
            .enable(True)
            .hide(True)
            .icon_color("rgba(0, 211, 255, 1)")
            .name("Annotations & Alerts")
            .type("dashboard")
        )
        .variables(list(variables(instance_all_default)))
    )
    for item in layout.items:
        built = built.with_row(item) if isinstance(item, db.Row) else built.with_panel(item)
    return built


def render(dashboard: db.Dashboard) -> str:
    """The dashboard's JSON as the SDK encodes it (the committed files are exactly this)."""
    return json.dumps(dashboard.build(), cls=JSONEncoder, indent=2, ensure_ascii=False) + "\n"
