"""Panels both dashboards show: the same query and look, each with its own description."""

from __future__ import annotations

from grafana_foundation_sdk.builders import common as options
from grafana_foundation_sdk.builders import stat as stat_panel
from grafana_foundation_sdk.builders import statetimeline
from grafana_foundation_sdk.builders import timeseries as timeseries_panel
from grafana_foundation_sdk.models import common as cm
from grafana_foundation_sdk.models import dashboard as dm

from dashboards.mixin.config import JOB, SEL, UNDISRUPTIVE, m
from dashboards.mixin.grafana import colours, green, panel, target, thresholds
from dashboards.mixin.kinds import stat, timeseries
from dashboards.mixin.mappings import IMPACT_MAPPINGS, IMPACT_STATE_EXPR, STATUS_MAPPINGS, event_state_expr
from dashboards.mixin.recording import JOB_POLL_ERRORS


def event_timeline(description: str, selector: str = SEL) -> statetimeline.Panel:
    """Each event per VM over time, coloured by its status."""
    return _state_timeline(
        "Event timeline",
        description,
        event_state_expr(selector),
        "{{instance}} {{event_type}} {{event_id}}",
        STATUS_MAPPINGS,
    )


def impact_timeline(description: str) -> statetimeline.Panel:
    """Each event over time, coloured by what it does to the VM."""
    return _state_timeline(
        "Event impact", description, IMPACT_STATE_EXPR, "{{event_type}} {{event_id}}", IMPACT_MAPPINGS
    )


def _state_timeline(
    title: str, description: str, expr: str, legend: str, mappings: list[dm.ValueMap]
) -> statetimeline.Panel:
    return (
        panel(statetimeline.Panel(), title, description, [target(expr, legend)], "none")
        .color_scheme(colours(dm.FieldColorModeId.THRESHOLDS))
        .thresholds(green())
        .mappings(list(mappings))
        .fill_opacity(80)
        .line_width(0)
        .align_value(cm.TimelineValueAlignment.LEFT)
        .merge_values(True)
        .row_height(0.8)
        .show_value(cm.VisibilityMode.AUTO)
        .legend(
            options.VizLegendOptions()
            .display_mode(cm.LegendDisplayMode.LIST)
            .placement(cm.LegendPlacement.BOTTOM)
            .show_legend(False)
        )
        .tooltip(options.VizTooltipOptions().mode(cm.TooltipDisplayMode.SINGLE).sort(cm.SortOrder.NONE))
    )


def soonest_not_before(description: str) -> stat_panel.Panel:
    return stat(
        "Soonest NotBefore",
        description,
        # Disruptive events only, of the VMs they may affect: a live migration's NotBefore is not "when".
        f"min(\n  {m('event_seconds_until_not_before')}{{{SEL}}}\n"
        f"  and on (cluster, job, instance, event_id)\n"
        f'  {m("event_info")}{{{SEL}, impact!~"{UNDISRUPTIVE}", affects_this_vm!="false"}}\n)',
        "s",
        steps=thresholds((None, "red"), (300, "orange"), (900, "green")),
        no_value="none scheduled",
    )


def approvals_by_result(description: str) -> timeseries_panel.Panel:
    return _by_result("Approvals by result", description, "approvals_total", "event_type")


def actions_by_result(description: str) -> timeseries_panel.Panel:
    return _by_result("Actions by result", description, "actions_total", "action")


def _by_result(title: str, description: str, counter: str, label: str) -> timeseries_panel.Panel:
    """Stacked bars of a counter's increase by ``label`` and result."""
    return timeseries(
        title,
        description,
        [
            target(
                f"sum by ({label}, result) (increase({m(counter)}{{{SEL}}}[$__rate_interval]))",
                f"{{{{{label}}}}} {{{{result}}}}",
            )
        ],
        "short",
        bars=True,
        stacked=True,
    )


def poll_errors_by_reason(description: str, *, fleet: bool = False) -> timeseries_panel.Panel:
    """``fleet``: from the job-level recording rule (every instance of the selected jobs), which stays fast
    at thousands of VMs; otherwise from the raw counters of the selected instances."""
    expr = (
        f"sum by (reason) ({JOB_POLL_ERRORS}{{{JOB}}})"
        if fleet
        else f"sum by (reason) (rate({m('poll_errors_total')}{{{SEL}}}[$__rate_interval]))"
    )
    return timeseries(
        "Poll errors by reason",
        description,
        [target(expr, "{{reason}}")],
        "ops",
        stacked=True,
    )
