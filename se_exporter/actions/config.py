"""The actions file (``--actions.config``): which command runs for which transitions of which events.

Its shape is declared once, as the types below (``config.schema``): a mistake is a start-up error (and a
``se-exporter check`` error) naming the key path, like the approval policy's. ``Action.matches`` is a
pure function of one transition and whether its event lists this VM.
"""

from __future__ import annotations

import math
import os
import shutil
from dataclasses import dataclass
from typing import Annotated

import msgspec

from se_exporter.common.files import read_text
from se_exporter.config.schema import CommandWord, check_command, decode, field_problem
from se_exporter.errors import ConfigError, show
from se_exporter.imds.document import EventTypeName
from se_exporter.imds.impact import Cause, Impact
from se_exporter.lifecycle.transitions import Transition, TransitionKind

KIND = "actions config"
DEFAULT_TIMEOUT_SECONDS = 30.0
DEFAULT_CONCURRENCY = 4
MAX_CONCURRENCY = 64

_Name = Annotated[str, msgspec.Meta(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")]
_EnvName = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", description="an environment variable name")]
_Seconds = Annotated[float, msgspec.Meta(gt=0, le=86_400, description="a number of seconds > 0 and <= 86400")]


class Action(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Runs ``command`` for each listed transition of an event that every other key set here matches."""

    name: _Name  # a label value of azure_scheduled_events_actions_total: letters, digits, "_", "." and "-"
    transitions: Annotated[tuple[TransitionKind, ...], msgspec.Meta(min_length=1)]
    command: Annotated[tuple[CommandWord, ...], msgspec.Meta(min_length=1)]
    event_types: Annotated[tuple[EventTypeName, ...], msgspec.Meta(min_length=1)] | None = None
    impacts: Annotated[tuple[Impact, ...], msgspec.Meta(min_length=1)] | None = None
    causes: Annotated[tuple[Cause, ...], msgspec.Meta(min_length=1)] | None = None
    affects_this_vm: bool | None = None  # true: only events listing this VM; an unknown VM name matches neither
    timeout_seconds: _Seconds = DEFAULT_TIMEOUT_SECONDS
    inherit_env: tuple[_EnvName, ...] = ()  # extra environment variables passed through to the command

    def __post_init__(self) -> None:
        check_command(self.command)
        if not math.isfinite(self.timeout_seconds):
            raise field_problem("timeout_seconds", f"must be a number of seconds > 0, got {self.timeout_seconds}")
        for key in ("transitions", "event_types", "impacts", "causes"):
            values = getattr(self, key) or ()
            for index, value in enumerate(values):
                if value in values[:index]:
                    raise field_problem(key, f"{show(str(value))} is listed twice", index)
        for index, name in enumerate(self.inherit_env):
            if name.startswith("SE_EVENT_"):
                raise field_problem("inherit_env", f"{show(name)} is set by se-exporter itself", index)

    def matches(self, transition: Transition, affects_this_vm: bool | None) -> bool:
        """Whether this action runs for ``transition`` (``affects_this_vm``: None while the VM name is unknown)."""
        return (
            transition.kind in self.transitions
            and (self.event_types is None or transition.event.event_type in self.event_types)
            and (self.impacts is None or transition.impact in self.impacts)
            and (self.causes is None or transition.cause in self.causes)
            and (self.affects_this_vm is None or affects_this_vm is self.affects_this_vm)
        )


class ActionsFile(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """The file as written (see docs/actions.md)."""

    actions: Annotated[tuple[Action, ...], msgspec.Meta(min_length=1, description="a non-empty list of actions")]
    concurrency: Annotated[int, msgspec.Meta(ge=1, le=MAX_CONCURRENCY)] = DEFAULT_CONCURRENCY


@dataclass(frozen=True, slots=True)
class Actions:
    """The validated file: the actions in order, and how many commands may run at once."""

    actions: tuple[Action, ...]
    concurrency: int = DEFAULT_CONCURRENCY
    source: str = "<actions>"

    def by_name(self, name: str) -> Action | None:
        return next((action for action in self.actions if action.name == name), None)


def load_actions(path: str | os.PathLike[str]) -> Actions:
    """Read and validate an actions file; raise ``ConfigError`` naming the key and the problem."""
    from se_exporter.config.strict_yaml import load_yaml  # PyYAML only when there is an actions file

    source = os.fspath(path)
    prefix = f"{KIND} {source}"
    data = load_yaml(prefix, read_text(prefix, source))
    if data is None:
        raise ConfigError(f"{prefix}: the file is empty; it needs at least one action")
    return parse_actions(data, source)


def parse_actions(data: object, source: str = "<actions>") -> Actions:
    """Validate an already-parsed actions document (the YAML file's content)."""
    prefix = f"{KIND} {source}"
    spec = decode(data, ActionsFile, prefix=prefix, each=("actions",))
    missing = [
        f"{prefix}: actions[{index}].command[0]: {show(action.command[0])} is not an executable file "
        "(nor found on PATH)"
        for index, action in enumerate(spec.actions)
        if shutil.which(action.command[0]) is None
    ]
    if missing:  # every one, one line each
        raise ConfigError("\n".join(missing))
    return Actions(spec.actions, spec.concurrency, source)
