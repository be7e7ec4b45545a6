"""Value mappings and the series the timelines colour: one place for status, impact and duration."""

from __future__ import annotations

from grafana_foundation_sdk.models.dashboard import ValueMap, ValueMappingResult

from dashboards.mixin.config import SEL, m

STATUS_MAPPINGS = [
    ValueMap(
        options={
            "1": ValueMappingResult(text="Scheduled", color="yellow", index=0),
            "2": ValueMappingResult(text="Started", color="red", index=1),
            "3": ValueMappingResult(text="Advisory", color="blue", index=2),
            "4": ValueMappingResult(text="Other status", color="purple", index=3),
        }
    )
]


def event_state_expr(selector: str = SEL) -> str:
    """One series per event and instance, valued by status, for state timelines."""
    return (
        f"max by (instance, event_type, event_id) (\n"
        f'    {m("event_info")}{{{selector}, event_status="Scheduled"}}\n'
        f'  or {m("event_info")}{{{selector}, event_status="Started"}} * 2\n'
        f'  or {m("event_info")}{{{selector}, event_status="Advisory"}} * 3\n'
        f'  or {m("event_info")}{{{selector}, event_status!~"Scheduled|Started|Advisory"}} * 4\n'
        f")"
    )


# One series per event, valued by impact (se_exporter.imds.impact), for a timeline coloured by what it does.
IMPACT_COLOURS = (
    ("none", "super-light-green"),
    ("live_migration", "green"),
    ("pause", "blue"),
    ("eviction_risk", "yellow"),
    ("reboot", "orange"),
    ("redeploy", "dark-orange"),
    ("eviction", "red"),
    ("termination", "dark-red"),
    ("unknown", "purple"),
)
IMPACT_STATE_EXPR = (
    "max by (instance, event_type, event_id) (\n"
    + "\n".join(
        f'  {"or " if index > 1 else "   "}{m("event_info")}{{{SEL}, impact="{impact}"}} * {index}'
        for index, (impact, _) in enumerate(IMPACT_COLOURS, start=1)
    )
    + "\n)"
)
IMPACT_MAPPINGS = [
    ValueMap(
        options={
            str(index): ValueMappingResult(text=impact, color=colour, index=index - 1)
            for index, (impact, colour) in enumerate(IMPACT_COLOURS, start=1)
        }
    )
]
IMPACT_TEXT_MAPPINGS = [
    ValueMap(
        options={
            impact: ValueMappingResult(color=colour, index=index)
            for index, (impact, colour) in enumerate(IMPACT_COLOURS)
        }
    )
]
DURATION_MAPPINGS = [ValueMap(options={"-1": ValueMappingResult(text="unknown", index=0)})]
UP_MAPPINGS = [ValueMap(options={"0": ValueMappingResult(text="DOWN"), "1": ValueMappingResult(text="UP")})]


def up_expr(job_selector: str) -> str:
    return f"up{{{job_selector}, {SEL}}}"
