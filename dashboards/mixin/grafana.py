"""Grafana building blocks on grafana-foundation-sdk's typed builders: queries, thresholds, overrides, the layout
grid and the panel kinds we use (the SDK's build for the Grafana version dashboards/README.md names).

Each function returns the SDK's builder, so a field Grafana's schema does not have is a type error, not a
silent typo in the JSON; the JSON is the SDK's encoding of what they build (``frame.render``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, Self, TypeVar

from grafana_foundation_sdk.builders import bargauge as bargauge_panel
from grafana_foundation_sdk.builders import common as options
from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.builders import prometheus
from grafana_foundation_sdk.builders import stat as stat_panel
from grafana_foundation_sdk.builders import table as table_panel
from grafana_foundation_sdk.builders import timeseries as timeseries_panel
from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.models import common as cm
from grafana_foundation_sdk.models import dashboard as dm
from grafana_foundation_sdk.models import prometheus as pm

from dashboards.mixin.config import DS, VM_UID

DATASOURCE = dm.DataSourceRef(type_val=DS["type"], uid=DS["uid"])
REFS = "ABCDEFGHIJ"
LAST_VALUE = options.ReduceDataOptions().calcs(["lastNotNull"]).fields("").values(False)


def target(expr: str, legend: str = "", *, instant: bool = False, fmt: str = "time_series") -> prometheus.Dataquery:
    query = (
        prometheus.Dataquery()
        .datasource(DATASOURCE)
        .editor_mode(pm.QueryEditorMode.CODE)
        .expr(expr)
        .format(pm.PromQueryFormat(fmt))
        .legend_format(legend or "__auto")
    )
    return query.instant() if instant else query.range()


def thresholds(*steps: tuple[float | None, str]) -> db.ThresholdsConfig:
    return (
        db.ThresholdsConfig()
        .mode(dm.ThresholdsMode.ABSOLUTE)
        .steps([dm.Threshold(value=value, color=colour) for value, colour in steps])
    )


def green() -> db.ThresholdsConfig:
    return thresholds((None, "green"))


def colours(mode: dm.FieldColorModeId) -> db.FieldColor:
    return db.FieldColor().mode(mode)


@dataclass(frozen=True)
class Override:
    """Field properties for the fields one matcher picks (a field's name, or a query's frames)."""

    matcher: dm.MatcherConfig
    properties: list[dm.DynamicConfigValue]


def override(name: str, **props: Any) -> Override:
    """``props`` by Grafana's property ids (``unit``, ``thresholds``, ``custom.cellOptions``...)."""
    return Override(dm.MatcherConfig(id_val="byName", options=name), _properties(props))


def right_axis(ref_id: str, unit: str) -> Override:
    """The series of query ``ref_id`` on the right axis, in ``unit``: one unit per axis."""
    return Override(
        dm.MatcherConfig(id_val="byFrameRefID", options=ref_id),
        _properties({"unit": unit, "custom.axisPlacement": "right"}),
    )


def _properties(props: dict[str, Any]) -> list[dm.DynamicConfigValue]:
    return [
        dm.DynamicConfigValue(id_val=key, value=value.build() if isinstance(value, cogbuilder.Builder) else value)
        for key, value in props.items()
    ]


class PanelBuilder(Protocol):
    """What every panel builder of the SDK has (each plugin's is a class of its own)."""

    def title(self, title: str) -> Self: ...
    def description(self, description: str) -> Self: ...
    def datasource(self, datasource: dm.DataSourceRef) -> Self: ...
    def with_target(self, target: cogbuilder.Builder[Any]) -> Self: ...
    def unit(self, unit: str) -> Self: ...
    def with_override(self, matcher: dm.MatcherConfig, properties: list[dm.DynamicConfigValue]) -> Self: ...
    def id(self, id_val: int) -> Self: ...
    def grid_pos(self, grid_pos: dm.GridPos) -> Self: ...
    def build(self) -> dm.Panel: ...


P = TypeVar("P", bound=PanelBuilder)


def panel(
    builder: P,
    title: str,
    description: str,
    targets: list[prometheus.Dataquery],
    unit: str,
    *,
    overrides: list[Override] | None = None,
) -> P:
    """What every panel has: title, description, our data source, its queries (A, B, ...), unit, overrides."""
    built = builder.title(title).description(description).datasource(DATASOURCE).unit(unit)
    for ref, query in zip(REFS, targets, strict=False):
        built = built.with_target(query.ref_id(ref))
    for each in overrides or []:
        built = built.with_override(each.matcher, each.properties)
    return built


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


def vm_link(title: str = "VM detail") -> list[dict[str, str]]:
    """A data link (a field's ``links`` property) to the VM detail dashboard of the row's instance."""
    return [
        {
            "title": title,
            "url": f"/d/{VM_UID}/azure-scheduled-events-vm-detail?var-datasource=${{datasource}}"
            "&var-job=${__data.fields.job}&var-instance=${__data.fields.instance}&${__url_time_range}",
        }
    ]


class Layout:
    """Places panels left to right on Grafana's 24-column grid, rows between them, each with its id."""

    def __init__(self) -> None:
        self.items: list[db.Row | cogbuilder.Builder[dm.Panel]] = []
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
        self.items.append(db.Row(title).id(self.next_id).grid_pos(dm.GridPos(h=1, w=24, x=0, y=self.y)))
        self.next_id += 1
        self.y += 1

    def add(self, panel: PanelBuilder, w: int, h: int) -> None:
        if self.x + w > 24:
            self._newline()
        assert isinstance(panel, cogbuilder.Builder), "a panel builder of the SDK"
        self.items.append(panel.id(self.next_id).grid_pos(dm.GridPos(h=h, w=w, x=self.x, y=self.y)))
        self.next_id += 1
        self.x += w
        self.row_h = max(self.row_h, h)
