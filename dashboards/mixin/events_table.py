"""The table of listed events both dashboards show: which VM, what it does, and when (as a clock time)."""

from __future__ import annotations

from grafana_foundation_sdk.builders import common as options
from grafana_foundation_sdk.builders import table as table_panel
from grafana_foundation_sdk.models.dashboard import ValueMap, ValueMappingResult

from dashboards.mixin.config import SEL, m
from dashboards.mixin.grafana import Override, override, target, thresholds, vm_link
from dashboards.mixin.kinds import table, transformation
from dashboards.mixin.mappings import DURATION_MAPPINGS, IMPACT_TEXT_MAPPINGS

EVENT = "cluster, job, instance, event_id"
INFO = f"{EVENT}, event_type, event_status, event_source, resource_type, affects_this_vm, impact, cause"
# Per-event gauges, each a column, in the order shown; the clock times are in milliseconds for Grafana.
COLUMNS = (
    ("B", "NotBefore", "event_not_before_timestamp_seconds", " * 1000"),
    ("C", "NotBefore in", "event_seconds_until_not_before", ""),
    ("D", "Time in Started", "event_started_seconds", ""),
    ("E", "Duration", "event_duration_seconds", ""),
    ("F", "Approved at", "event_approved_timestamp_seconds", " * 1000"),
)
ORDER = ("instance", "impact", "event_type", "event_status", *(f"Value #{ref}" for ref, *_ in COLUMNS))
LABEL_NAMES = {
    "impact": "Impact",
    "cause": "Cause",
    "event_type": "Type",
    "event_status": "Status",
    "event_source": "Source",
    "affects_this_vm": "Affects this VM",
    "resource_type": "Resource type",
    "event_id": "Event ID",
}


def events_table(title: str, description: str, selector: str) -> table_panel.Panel:
    """Every event ``selector`` picks from event_info, one row per VM and event, its gauges merged in."""
    events = f"{m('event_info')}{{{selector}}}"
    targets = [target(f"max by ({INFO}) ({events})", instant=True, fmt="table")]
    targets += [
        target(
            f"max by ({EVENT}) ({m(metric)}{{{SEL}}} and on ({EVENT}) {events}){scale}",
            instant=True,
            fmt="table",
        )
        for _ref, _name, metric, scale in COLUMNS
    ]
    rest = ("cause", "event_source", "affects_this_vm", "resource_type", "event_id", "job", "cluster")
    organize = transformation(
        "organize",
        excludeByName={"Time": True, "Value #A": True},
        indexByName={name: i for i, name in enumerate((*ORDER, *rest))},
        renameByName={**LABEL_NAMES, **{f"Value #{ref}": name for ref, name, *_ in COLUMNS}},
    )
    built = table(
        title,
        description,
        targets,
        "none",
        transformations=[transformation("merge"), organize],
        overrides=_overrides(),
        filterable=True,
    )
    return built.sort_by([options.TableSortByFieldState().display_name("NotBefore").desc(False)])


def _overrides() -> list[Override]:
    colour_text = {"custom.cellOptions": {"type": "color-text"}}
    return [
        override("instance", links=vm_link()),
        override("NotBefore", unit="dateTimeAsIso"),
        override(
            "NotBefore in",
            unit="s",
            thresholds=thresholds((None, "red"), (300, "orange"), (900, "transparent")),
            **colour_text,
        ),
        override(
            "Time in Started", unit="s", thresholds=thresholds((None, "transparent"), (600, "red")), **colour_text
        ),
        override("Duration", unit="s", mappings=DURATION_MAPPINGS),
        override("Approved at", unit="dateTimeAsIso"),
        override("Impact", mappings=IMPACT_TEXT_MAPPINGS, **colour_text),
        override(
            "Status",
            mappings=[
                ValueMap(
                    options={
                        "Scheduled": ValueMappingResult(color="yellow", index=0),
                        "Started": ValueMappingResult(color="red", index=1),
                    }
                )
            ],
            **colour_text,
        ),
    ]
