"""Scenarios: timed event plans, played by :class:`~se_exporter.simulator.world.SimWorld`.

All offsets are simulated seconds from the moment the scenario starts playing.
"""

from __future__ import annotations

from dataclasses import dataclass

from se_exporter.simulator.model import SCHEDULED, EventPlan


class ScenarioError(ValueError):
    """An invalid scenario; the message names the offending key (``events[0].notice``)."""


@dataclass(frozen=True)
class Reschedule:
    """At offset ``at``, move NotBefore to ``at + notice`` (only while the event is Scheduled)."""

    at: float
    notice: float


@dataclass(frozen=True)
class ScenarioEvent:
    """One event of a scenario.

    ``alias`` names the event within the scenario; each play assigns a fresh GUID.
    ``start_at`` starts it early (as if another VM approved it), ``cancel_at`` removes it while
    still Scheduled (cancelled maintenance). Both are offsets from the scenario start.
    """

    alias: str
    plan: EventPlan
    at: float = 0.0
    start_at: float | None = None
    cancel_at: float | None = None
    reschedules: tuple[Reschedule, ...] = ()


@dataclass(frozen=True)
class Scenario:
    name: str
    events: tuple[ScenarioEvent, ...]
    description: str = ""

    def validate(self, source: str | None = None) -> None:
        """Raise :class:`ScenarioError` for the first inconsistency; messages start with ``source``."""
        prefix = source or f"scenario {self.name!r}"
        if not self.events:
            raise ScenarioError(f"{prefix}: events: must list at least one event")
        seen: set[str] = set()
        for index, event in enumerate(self.events):
            where = f"{prefix}: events[{index}]"
            if event.alias in seen:
                raise ScenarioError(f"{where}.id: duplicate id {event.alias!r}")
            seen.add(event.alias)
            _check_event(event, where)


def _check_event(event: ScenarioEvent, where: str) -> None:
    plan = event.plan
    for key, value in (("at", event.at), ("started_for", plan.started_for), ("notice", plan.notice)):
        if value is not None and value < 0:
            raise ScenarioError(f"{where}.{key}: must be >= 0")
    if not plan.resources:
        raise ScenarioError(f"{where}.resources: must list at least one VM")
    if plan.status != SCHEDULED:  # listed as it is until it goes (scenario_file refused the keys it ignores)
        return
    if plan.notice is None:
        _check_no_notice(event, where)
    else:
        _check_timing(event, plan.notice, where)


def _check_no_notice(event: ScenarioEvent, where: str) -> None:
    # Appears Started: nothing can happen to it while Scheduled.
    used = [key for key, value in (("start_at", event.start_at), ("cancel_at", event.cancel_at)) if value is not None]
    if event.reschedules:
        used.append("reschedule")
    if used:
        raise ScenarioError(f"{where}.{used[0]}: not allowed for an event without notice")


def _check_timing(event: ScenarioEvent, notice: float, where: str) -> None:
    not_before = event.at + notice
    last = event.at
    for index, step in enumerate(event.reschedules):
        key = f"{where}.reschedule[{index}]"
        if not last < step.at < not_before:
            raise ScenarioError(
                f"{key}.at: must be after the previous step ({last:g}) and before NotBefore ({not_before:g})"
            )
        if step.notice < 0:
            raise ScenarioError(f"{key}.notice: must be >= 0")
        last, not_before = step.at, step.at + step.notice
    for key, value in (("start_at", event.start_at), ("cancel_at", event.cancel_at)):
        if value is not None and not event.at <= value < not_before:
            raise ScenarioError(f"{where}.{key}: must be within [at, NotBefore) = [{event.at:g}, {not_before:g})")
