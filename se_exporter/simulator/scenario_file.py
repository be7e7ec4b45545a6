"""Scenario files (YAML) and the built-in scenarios.

Format (all times are simulated seconds; offsets count from the scenario start)::

    name: my-maintenance          # optional, defaults to the file name without extension
    description: free text        # optional
    events:                       # required, at least one
      - id: maint                 # required, unique in the file; each play gets a fresh GUID
        type: Reboot              # required: Freeze | Reboot | Redeploy | Preempt | Terminate |
                                  #   SpotRebalanceRecommendation (a Spot eviction-risk notice)
        status: Scheduled         # Scheduled (default) | Advisory (listed, never started: eviction risk)
        listed_for: 300           # Advisory only: time listed before it disappears (default 300)
        source: Platform          # Platform (default) | User
        at: 0                     # when it appears (default 0)
        notice: 900               # NotBefore = at + notice; null = appears already Started
        duration: -1              # DurationInSeconds (-1 unknown, 0 no impact; default -1)
        started_for: 60           # time in Started before it disappears (default 60)
        resources: [self, vm-2]   # VM names; "self" is the simulated VM (default [self])
        description: text         # Description (default "")
        resource_type: VirtualMachine
        strict: true              # false allows a type or a status outside the documented ones
        start_at: 100             # optional: started early (someone approved it)
        cancel_at: 300            # optional: removed while Scheduled (cancelled)
        reschedule:               # optional: NotBefore moves while Scheduled
          - {at: 120, notice: 1800}   # new NotBefore = 120 + 1800

An event of another status than Scheduled has no NotBefore and never starts: ``notice``, ``start_at``,
``cancel_at`` and ``reschedule`` do not apply to it.

Any unknown key or wrong type is a :class:`ScenarioError` naming the key, e.g.
``maint.yaml: events[0].notice: must be a number, got 'soon'``.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Annotated

import msgspec

from se_exporter.common.files import read_text
from se_exporter.config.schema import decode, field_problem
from se_exporter.config.strict_yaml import load_yaml
from se_exporter.simulator.model import ADVISORY, EVENT_TYPES, SCHEDULED, SELF, SPOT_NOTICE, EventPlan, EventSourceName
from se_exporter.simulator.scenario import Reschedule, Scenario, ScenarioError, ScenarioEvent

_Seconds = Annotated[float, msgspec.Meta(ge=0)]
_Name = Annotated[str, msgspec.Meta(min_length=1)]


class _RescheduleSpec(msgspec.Struct, forbid_unknown_fields=True):
    at: float
    notice: _Seconds


class _EventSpec(msgspec.Struct, forbid_unknown_fields=True):
    id: _Name
    type: _Name
    source: EventSourceName = "Platform"
    at: _Seconds = 0.0
    notice: _Seconds | msgspec.UnsetType | None = msgspec.UNSET  # 900 when unset; null: appears already Started
    duration: int = -1
    started_for: _Seconds = 60.0
    resources: Annotated[tuple[_Name, ...], msgspec.Meta(min_length=1, description="a non-empty list of VM names")] = (
        SELF,
    )
    description: str = ""
    resource_type: str = "VirtualMachine"
    strict: bool = True  # false allows a type or a status outside the documented ones
    status: _Name = SCHEDULED
    listed_for: _Seconds = 300.0
    start_at: float | None = None
    cancel_at: float | None = None
    reschedule: tuple[_RescheduleSpec, ...] = ()

    def __post_init__(self) -> None:
        if self.strict and self.type not in EVENT_TYPES:
            raise field_problem("type", f"must be one of {', '.join(EVENT_TYPES)}, got {self.type!r}")
        if self.strict and (self.type == SPOT_NOTICE) != (self.status == ADVISORY):
            raise field_problem("status", f"{ADVISORY} goes with type {SPOT_NOTICE} and only with it")
        if self.strict and self.status not in (SCHEDULED, ADVISORY):
            raise field_problem("status", f"must be {SCHEDULED} or {ADVISORY}, got {self.status!r}")
        if self.status == SCHEDULED:
            return
        given = [key for key in ("notice", "start_at", "cancel_at") if getattr(self, key) not in (None, msgspec.UNSET)]
        if given or self.reschedule:
            raise field_problem(
                (given or ["reschedule"])[0],
                f"does not apply to an event listed as {self.status}: it has no NotBefore and never starts "
                "(listed_for says how long it is listed)",
            )

    def scenario_event(self) -> ScenarioEvent:
        plan = EventPlan(
            self.type,
            self.source,
            900.0 if self.notice is msgspec.UNSET else self.notice,
            self.duration,
            self.started_for,
            self.resources,
            self.description,
            self.resource_type,
            self.status,
            self.listed_for,
        )
        steps = tuple(Reschedule(step.at, step.notice) for step in self.reschedule)
        return ScenarioEvent(self.id, plan, self.at, self.start_at, self.cancel_at, steps)


class _ScenarioSpec(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    name: _Name | None = None
    description: str = ""
    events: Annotated[tuple[_EventSpec, ...], msgspec.Meta(min_length=1, description="a non-empty list of events")]


def load_scenario_file(path: str | Path) -> Scenario:
    """Read and validate a scenario file."""
    path = Path(path)
    text = read_text(str(path), path, ScenarioError)
    return parse_scenario(text, source=str(path), default_name=path.stem)


def parse_scenario(text: str, *, source: str = "<scenario>", default_name: str = "scenario") -> Scenario:
    """Parse YAML text into a validated :class:`Scenario` (a key given twice is an error too)."""
    return scenario_from_dict(load_yaml(source, text, ScenarioError), source=source, default_name=default_name)


def scenario_from_dict(data: object, *, source: str = "<scenario>", default_name: str = "scenario") -> Scenario:
    """Build a :class:`Scenario` from already-parsed YAML/JSON data."""
    spec = decode(data, _ScenarioSpec, prefix=source, error=ScenarioError)
    scenario = Scenario(
        name=spec.name or default_name,
        description=spec.description,
        events=tuple(event.scenario_event() for event in spec.events),
    )
    scenario.validate(source)
    return scenario


def builtin_names() -> tuple[str, ...]:
    """Names of the scenarios shipped in ``se_exporter/simulator/scenarios/``."""
    folder = resources.files("se_exporter.simulator") / "scenarios"
    return tuple(sorted(p.name.removesuffix(".yaml") for p in folder.iterdir() if p.name.endswith(".yaml")))


def builtin_scenario(name: str) -> Scenario:
    """Load one built-in scenario by name."""
    if name not in builtin_names():
        raise ScenarioError(f"unknown built-in scenario {name!r} (known: {', '.join(builtin_names())})")
    text = (resources.files("se_exporter.simulator") / "scenarios" / f"{name}.yaml").read_text("utf-8")
    return parse_scenario(text, source=f"built-in {name}", default_name=name)


def resolve_scenario(spec: str) -> Scenario:
    """A built-in name, or else a path to a YAML file."""
    if spec in builtin_names():
        return builtin_scenario(spec)
    if not Path(spec).exists():
        raise ScenarioError(
            f"scenario {spec!r}: neither a built-in ({', '.join(builtin_names())}) nor an existing file"
        )
    return load_scenario_file(spec)
