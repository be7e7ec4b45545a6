"""Grafana building blocks on grafana-foundation-sdk's typed builders: queries, thresholds, overrides, what every
panel has, and the layout grid (the SDK's build for the Grafana version dashboards/README.md names); the
panel kinds we use are in kinds.py.

Each function returns the SDK's builder, so a field Grafana's schema does not have is a type error, not a
silent typo in the JSON; the JSON is the SDK's encoding of what they build (``frame.render``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, Self, TypeVar

from grafana_foundation_sdk.builders import common as options
from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.builders import prometheus
from grafana_foundation_sdk.cog import builder as cogbuilder
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
