"""Scenario files (YAML) and the built-in scenarios.

Format (all times are simulated seconds; offsets count from the scenario start)::

    name: my-maintenance          # optional, defaults to the file name without extension
    description: free text        # optional
    events:                       # required, at least one
      - id: maint                 # required, unique in the file; each play gets a fresh GUID
        type: Reboot              # required: Freeze | Reboot | Redeploy | Preempt | Terminate
        source: Platform          # Platform (default) | User
        at: 0                     # when it appears (default 0)
        notice: 900               # NotBefore = at + notice; null = appears already Started
        duration: -1              # DurationInSeconds (-1 unknown, 0 no impact; default -1)
        started_for: 60           # time in Started before it disappears (default 60)
        resources: [self, vm-2]   # VM names; "self" is the simulated VM (default [self])
        description: text         # Description (default "")
        resource_type: VirtualMachine
        strict: true              # false allows a type outside the five documented ones
        start_at: 100             # optional: started early (someone approved it)
        cancel_at: 300            # optional: removed while Scheduled (cancelled)
        reschedule:               # optional: NotBefore moves while Scheduled
          - {at: 120, notice: 1800}   # new NotBefore = 120 + 1800

Any unknown key or wrong type is a :class:`ScenarioError` naming the key, e.g.
``maint.yaml: events[0].notice: must be a number, got 'soon'``.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from se_exporter.simulator.model import EVENT_SOURCES, EVENT_TYPES, SELF, EventPlan
from se_exporter.simulator.scenario import Reschedule, Scenario, ScenarioError, ScenarioEvent

_TOP_KEYS = {"name", "description", "events"}
_EVENT_KEYS = {
    "id", "type", "source", "at", "notice", "duration", "started_for", "resources", "description",
    "resource_type", "strict", "start_at", "cancel_at", "reschedule",
}


def load_scenario_file(path: str | Path) -> Scenario:
    """Read and validate a scenario file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ScenarioError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    return parse_scenario(text, source=str(path), default_name=path.stem)


def parse_scenario(text: str, *, source: str = "<scenario>", default_name: str = "scenario") -> Scenario:
    """Parse YAML text into a validated :class:`Scenario`."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ScenarioError(f"{source}: not valid YAML: {exc}") from exc
    return scenario_from_dict(data, source=source, default_name=default_name)


def scenario_from_dict(data: Any, *, source: str = "<scenario>", default_name: str = "scenario") -> Scenario:
    """Build a :class:`Scenario` from already-parsed YAML/JSON data."""
    _require_mapping(data, _TOP_KEYS, source, "top level")
    events = data.get("events")
    if not isinstance(events, list) or not events:
        raise ScenarioError(f"{source}: events: must be a non-empty list")
    scenario = Scenario(
        name=_string(data, "name", source, default_name),
        description=_string(data, "description", source, ""),
        events=tuple(_event(item, f"{source}: events[{i}]") for i, item in enumerate(events)),
    )
    scenario.validate(source)
    return scenario


def _event(item: Any, where: str) -> ScenarioEvent:
    _require_mapping(item, _EVENT_KEYS, where, "event")
    if "id" not in item or "type" not in item:
        missing = "id" if "id" not in item else "type"
        raise ScenarioError(f"{where}.{missing}: required")
    strict = item.get("strict", True)
    if not isinstance(strict, bool):
        raise ScenarioError(f"{where}.strict: must be true or false")
    plan = EventPlan(
        event_type=_choice(item, "type", where, EVENT_TYPES if strict else None, ""),
        event_source=_choice(item, "source", where, EVENT_SOURCES, "Platform"),
        notice=_optional_number(item, "notice", where, 900.0),
        duration=int(_number(item, "duration", where, -1, integer=True)),
        started_for=_number(item, "started_for", where, 60.0),
        resources=_resources(item, where),
        description=_string(item, "description", where, ""),
        resource_type=_string(item, "resource_type", where, "VirtualMachine"),
    )
    return ScenarioEvent(
        alias=_string(item, "id", where, ""),
        plan=plan,
        at=_number(item, "at", where, 0.0),
        start_at=_optional_number(item, "start_at", where, None),
        cancel_at=_optional_number(item, "cancel_at", where, None),
        reschedules=_reschedules(item.get("reschedule", []), f"{where}.reschedule"),
    )


def _reschedules(value: Any, where: str) -> tuple[Reschedule, ...]:
    if not isinstance(value, list):
        raise ScenarioError(f"{where}: must be a list")
    steps = []
    for i, step in enumerate(value):
        key = f"{where}[{i}]"
        _require_mapping(step, {"at", "notice"}, key, "reschedule step")
        for required in ("at", "notice"):
            if required not in step:
                raise ScenarioError(f"{key}.{required}: required")
        steps.append(Reschedule(at=_number(step, "at", key, 0.0), notice=_number(step, "notice", key, 0.0)))
    return tuple(steps)


def _require_mapping(value: Any, allowed: set[str], where: str, what: str) -> None:
    if not isinstance(value, dict):
        raise ScenarioError(f"{where}: {what} must be a mapping, got {type(value).__name__}")
    for key in value:
        if key not in allowed:
            raise ScenarioError(f"{where}.{key}: unknown key (allowed: {', '.join(sorted(allowed))})")


def _string(data: dict[str, Any], key: str, where: str, default: str) -> str:
    value = data.get(key, default)
    if not isinstance(value, str) or (key in {"id", "name"} and not value):
        raise ScenarioError(f"{where}.{key}: must be a non-empty string, got {value!r}")
    return value


def _choice(data: dict[str, Any], key: str, where: str, allowed: tuple[str, ...] | None, default: str) -> str:
    value = _string(data, key, where, default)
    if allowed is not None and value not in allowed:
        raise ScenarioError(f"{where}.{key}: must be one of {', '.join(allowed)}, got {value!r}")
    return value


def _number(data: dict[str, Any], key: str, where: str, default: float, *, integer: bool = False) -> float:
    value = data.get(key, default)
    # bool is an int subclass: "notice: yes" must not become 1.
    ok_type = int if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, ok_type):
        kind = "an integer" if integer else "a number"
        raise ScenarioError(f"{where}.{key}: must be {kind}, got {value!r}")
    return float(value)


def _optional_number(data: dict[str, Any], key: str, where: str, default: float | None) -> float | None:
    value = data.get(key, default)
    if value is None:
        return None
    return _number(data, key, where, value)


def _resources(data: dict[str, Any], where: str) -> tuple[str, ...]:
    value = data.get("resources", [SELF])
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
        raise ScenarioError(f"{where}.resources: must be a non-empty list of VM names, got {value!r}")
    return tuple(value)


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
