"""The approval policy: which Scheduled Events this VM may approve, and the file that says so.

The file's shape is declared once, as the types below (see ``config.schema``): a mistake is a
start-up error naming the key. ``Policy.decide`` is a pure function of one event, this VM's name
and the time, returning a ``Verdict``: a candidate for approval, or a skip with its reason.
"""

from __future__ import annotations

import hashlib
import math
import os
import shutil
from dataclasses import dataclass
from typing import Annotated, Literal, get_args

import msgspec

from se_exporter.approval.rules import SCOPE_GROUP, Rule
from se_exporter.config.files import read_text, show
from se_exporter.config.schema import CommandWord, check_command, decode, field_problem
from se_exporter.config.strict_yaml import load_yaml
from se_exporter.errors import ConfigError
from se_exporter.imds.document import SCHEDULED, ScheduledEvent
from se_exporter.imds.impact import Classification, classify

KIND = "approval config"
Leader = Literal["first_resource", "any_listed"]
LEADER_FIRST_RESOURCE, LEADER_ANY_LISTED = get_args(Leader)
DEFAULT_HOOK_TIMEOUT_SECONDS = 300.0

# Skip reasons of a Verdict.
NOT_SCHEDULED = "not_scheduled"
VM_NAME_UNKNOWN = "vm_name_unknown"
NOT_THIS_VM = "not_this_vm"
NOT_LEADER = "not_leader"
NO_RULE = "no_rule"

_VMName = Annotated[str, msgspec.Meta(min_length=1, pattern=r"^\S+$", description="a VM name as Resources lists it")]
_EnvName = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", description="an environment variable name")]
_Seconds = Annotated[float, msgspec.Meta(gt=0, description="a number of seconds > 0")]


class Hook(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The command run before approving; approval follows only its exit status 0."""

    command: Annotated[tuple[CommandWord, ...], msgspec.Meta(min_length=1)]
    timeout_seconds: _Seconds = DEFAULT_HOOK_TIMEOUT_SECONDS
    inherit_env: tuple[_EnvName, ...] = ()  # extra environment variables passed through to the hook

    def __post_init__(self) -> None:
        check_command(self.command)
        if not math.isfinite(self.timeout_seconds):
            raise field_problem("timeout_seconds", f"must be a number of seconds > 0, got {self.timeout_seconds}")
        for index, name in enumerate(self.inherit_env):
            if name.startswith("SE_EVENT_"):
                raise field_problem(f"inherit_env[{index}]", f"{show(name)} is set by se-exporter itself")


class PolicyFile(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """The file as written (see docs/approval.md)."""

    dry_run: bool = False
    leader: Leader = "first_resource"
    # The VMs that approve, with their rules of scope "group", the events of their availability set or placement
    # group that do not list them: Azure's designated primary and secondary approvers, named, so that one policy
    # file shared by a whole set (a DaemonSet's) does not make every VM of the set approve.
    group_approvers: tuple[_VMName, ...] = ()
    rules: Annotated[tuple[Rule, ...], msgspec.Meta(min_length=1, description="a non-empty list of rules")]
    hook: Hook | None = None

    def __post_init__(self) -> None:
        for index, rule in enumerate(self.rules):  # unique names: config/schema.py, on the file as written
            if rule.scope == SCOPE_GROUP and not self.group_approvers:
                raise field_problem(
                    f"rules[{index}].scope",
                    "group needs group_approvers, the VMs that approve for their group (Azure's primary and "
                    "secondary), or every VM of the set would approve at once",
                )


@dataclass(frozen=True, slots=True)
class Verdict:
    """A candidate for approval (``rule`` matched) or a skip (``reason`` is one of the skip codes)."""

    candidate: bool
    rule: str = ""
    reason: str = ""
    detail: str = ""


@dataclass(frozen=True, slots=True)
class Policy:
    rules: tuple[Rule, ...]
    dry_run: bool = False
    leader: str = LEADER_FIRST_RESOURCE
    hook: Hook | None = None
    source: str = "<policy>"
    group_approvers: tuple[str, ...] = ()

    @property
    def time_dependent(self) -> bool:
        """Whether a rule's verdict may change with the time alone (``not_before_within_seconds``)."""
        return any(rule.not_before_within_seconds is not None for rule in self.rules)

    @property
    def fingerprint(self) -> str:
        """Changes whenever what the policy decides or runs changes (not when only the file moves)."""
        text = repr((self.rules, self.dry_run, self.leader, self.hook, self.group_approvers))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def decide(
        self, event: ScheduledEvent, vm_name: str | None, now: float, classification: Classification | None = None
    ) -> Verdict:
        """``classification``: the store's (it knows how the event was first seen); without it the event
        is classified as it is now."""
        if event.event_status != SCHEDULED:
            return Verdict(False, reason=NOT_SCHEDULED, detail=f"status is {event.event_status}, not Scheduled")
        if not vm_name:
            return Verdict(False, reason=VM_NAME_UNKNOWN, detail="this VM's name is unknown, so approving is unsafe")
        # Azure resource names are case-insensitive.
        listed = [name.casefold() for name in event.resources]
        rules, scope = self.rules, ""
        if vm_name.casefold() not in listed:
            rules = self._group_rules(vm_name)
            if not rules:
                return Verdict(False, reason=NOT_THIS_VM, detail=f"{vm_name} is not in Resources {_names(event)}")
            scope = f" for the group: {vm_name} is a group approver, not in Resources {_names(event)}"
        elif self.leader == LEADER_FIRST_RESOURCE and listed[0] != vm_name.casefold():
            detail = f"the leader is the first of Resources ({event.resources[0]}), not {vm_name}"
            return Verdict(False, reason=NOT_LEADER, detail=detail)
        classification = classification or classify(event)
        for rule in rules:
            if rule.matches(event, classification, now):
                return Verdict(True, rule=rule.name, detail=f"rule {rule.name} matched{scope}")
        detail = (
            f"no rule matched {event.event_type} from {event.event_source or 'unknown source'} "
            f"(impact {classification.impact}, cause {classification.cause}), "
            f"DurationInSeconds {event.duration_seconds}, {len(event.resources)} resource(s)"
        )
        return Verdict(False, reason=NO_RULE, detail=detail + scope)

    def _group_rules(self, vm_name: str) -> tuple[Rule, ...]:
        """The rules this VM applies to an event that does not list it: none unless it is a group approver."""
        if vm_name.casefold() not in (name.casefold() for name in self.group_approvers):
            return ()
        return tuple(rule for rule in self.rules if rule.scope == SCOPE_GROUP)


def load_policy(path: str | os.PathLike[str]) -> Policy:
    """Read and validate a policy file; raise ``ConfigError`` naming the key and the problem."""
    source = os.fspath(path)
    prefix = f"{KIND} {source}"
    data = load_yaml(prefix, read_text(prefix, source))
    if data is None:
        raise ConfigError(f"{prefix}: the file is empty; it needs at least one rule")
    return parse_policy(data, source)


def parse_policy(data: object, source: str = "<policy>") -> Policy:
    """Validate an already-parsed policy document (the YAML file's content)."""
    prefix = f"{KIND} {source}"
    spec = decode(data, PolicyFile, prefix=prefix, each=("rules",))
    if spec.hook is not None and shutil.which(spec.hook.command[0]) is None:
        raise ConfigError(
            f"{prefix}: hook.command[0]: {show(spec.hook.command[0])} is not an executable file (nor found on PATH)"
        )
    return Policy(
        rules=spec.rules,
        dry_run=spec.dry_run,
        leader=spec.leader,
        hook=spec.hook,
        source=source,
        group_approvers=spec.group_approvers,
    )


def _names(event: ScheduledEvent, limit: int = 5) -> str:
    shown = ", ".join(event.resources[:limit])
    more = len(event.resources) - limit
    return f"[{shown}{f', and {more} more' if more > 0 else ''}]"
