"""The panel kinds both dashboards use, each on its SDK builder with the options we set: stat, time series, bar
gauge, table (and a table's transformations)."""

from __future__ import annotations

from typing import Any

from grafana_foundation_sdk.builders import bargauge as bargauge_panel
from grafana_foundation_sdk.builders import common as options
from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.builders import prometheus
from grafana_foundation_sdk.builders import stat as stat_panel
from grafana_foundation_sdk.builders import table as table_panel
from grafana_foundation_sdk.builders import timeseries as timeseries_panel
from grafana_foundation_sdk.models import common as cm
from grafana_foundation_sdk.models import dashboard as dm

from dashboards.mixin.grafana import LAST_VALUE, Override, colours, green, panel, target


def stat(
    title: str,
    description: str,
    expr: str,
    unit: str,
    *,
    steps: db.ThresholdsConfig | None = None,
    no_value: str | None = None,
    mappings: list[dm.ValueMap] | None = None,
    decimals: int | None = None,
) -> stat_panel.Panel:
    built = (
        panel(stat_panel.Panel(), title, description, [target(expr, instant=True)], unit)
        .color_scheme(colours(dm.FieldColorModeId.THRESHOLDS))
        .thresholds(steps or green())
        .mappings(list(mappings or []))
        .color_mode(cm.BigValueColorMode.BACKGROUND)
        .graph_mode(cm.BigValueGraphMode.NONE)
        .justify_mode(cm.BigValueJustifyMode.AUTO)
        .orientation(cm.VizOrientation.AUTO)
        .text_mode(cm.BigValueTextMode.AUTO)
        .reduce_options(LAST_VALUE)
    )
    if no_value is not None:
        built = built.no_value(no_value)
    return built.decimals(decimals) if decimals is not None else built


def timeseries(
    title: str,
    description: str,
    targets: list[prometheus.Dataquery],
    unit: str,
    *,
    bars: bool = False,
    stacked: bool = False,
    steps: db.ThresholdsConfig | None = None,
    min_zero: bool = True,
    decimals: int | None = None,
    line_interpolation: cm.LineInterpolation = cm.LineInterpolation.LINEAR,
    overrides: list[Override] | None = None,
) -> timeseries_panel.Panel:
    """``unit`` is the left axis'; a query of another unit goes on the right axis (``right_axis``)."""
    built = (
        panel(timeseries_panel.Panel(), title, description, targets, unit, overrides=overrides)
        .color_scheme(colours(dm.FieldColorModeId.PALETTE_CLASSIC))
        .draw_style(cm.GraphDrawStyle.BARS if bars else cm.GraphDrawStyle.LINE)
        .fill_opacity(60 if bars else 10)
        .line_width(1)
        .line_interpolation(line_interpolation)
        .point_size(4)
        .show_points(cm.VisibilityMode.NEVER)
        .span_nulls(False)
        .stacking(options.StackingConfig().group("A").mode(cm.StackingMode.NORMAL if stacked else cm.StackingMode.NONE))
        .thresholds_style(
            options.GraphThresholdsStyleConfig().mode(
                cm.GraphThresholdsStyleMode.DASHED if steps else cm.GraphThresholdsStyleMode.OFF
            )
        )
        .thresholds(steps or green())
        .legend(
            options.VizLegendOptions()
            .calcs(["lastNotNull", "max"])
            .display_mode(cm.LegendDisplayMode.TABLE)
            .placement(cm.LegendPlacement.RIGHT)
            .show_legend(True)
        )
        .tooltip(options.VizTooltipOptions().mode(cm.TooltipDisplayMode.MULTI).sort(cm.SortOrder.DESCENDING))
    )
    if min_zero:
        built = built.min(0)
    return built.decimals(decimals) if decimals is not None else built


def bargauge(title: str, description: str, targets: list[prometheus.Dataquery], unit: str) -> bargauge_panel.Panel:
    return (
        panel(bargauge_panel.Panel(), title, description, targets, unit)
        .color_scheme(colours(dm.FieldColorModeId.CONTINUOUS_BL_PU))
        .min(0)
        .thresholds(green())
        .display_mode(cm.BarGaugeDisplayMode.GRADIENT)
        .orientation(cm.VizOrientation.HORIZONTAL)
        .show_unfilled(True)
        .value_mode(cm.BarGaugeValueMode.COLOR)
        .name_placement(cm.BarGaugeNamePlacement.AUTO)
        .reduce_options(LAST_VALUE)
    )


def table(
    title: str,
    description: str,
    targets: list[prometheus.Dataquery],
    unit: str,
    *,
    transformations: list[dm.DataTransformerConfig],
    overrides: list[Override] | None = None,
    filterable: bool = False,
) -> table_panel.Panel:
    """A table of instant queries, merged and organized by ``transformations``; no footer."""
    built = (
        panel(table_panel.Panel(), title, description, targets, unit, overrides=overrides)
        .show_header(True)
        .cell_height(cm.TableCellHeight.SM)
        .footer(options.TableFooterOptions().show(False).reducer(["sum"]))
        .transformations(transformations)
        .align(cm.FieldTextAlignment.AUTO)
        .cell_options(cm.TableAutoCellOptions())
    )
    return built.filterable(True) if filterable else built


def transformation(kind: str, **settings: Any) -> dm.DataTransformerConfig:
    return dm.DataTransformerConfig(id_val=kind, options=settings)
