"""The approval policy: which Scheduled Events this VM may approve, and the file that says so.

``load_policy`` validates the YAML file of DESIGN.md strictly (a mistake is a start-up error naming
the key); ``Policy.decide`` is a pure function of one event, this VM's name and the time.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from dataclasses import dataclass

from se_exporter.approval._validate import KIND, Fields, load_yaml, show
from se_exporter.config import files as config_file
from se_exporter.errors import ConfigError
from se_exporter.imds.document import EVENT_TYPES, STATUS_SCHEDULED, ScheduledEvent

EVENT_SOURCES = ("Platform", "User")
LEADER_FIRST_RESOURCE = "first_resource"
LEADER_ANY_LISTED = "any_listed"
LEADERS = (LEADER_FIRST_RESOURCE, LEADER_ANY_LISTED)
DEFAULT_HOOK_TIMEOUT_SECONDS = 300.0

# Skip reasons returned by Policy.decide.
NOT_SCHEDULED = "not_scheduled"
VM_NAME_UNKNOWN = "vm_name_unknown"
NOT_THIS_VM = "not_this_vm"
NOT_LEADER = "not_leader"
NO_RULE = "no_rule"

_TOP_KEYS = ("dry_run", "leader", "rules", "hook")
_MATCH_KEYS = (
    "event_types",
    "event_sources",
    "min_duration_seconds",
    "max_duration_seconds",
    "not_before_within_seconds",
    "max_resources",
    "description_pattern",
)
_HOOK_KEYS = ("command", "timeout_seconds", "inherit_env")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True, slots=True)
class Rule:
    """Matches an event when every key that is set matches (unset keys match anything)."""

    name: str
    event_types: tuple[str, ...] | None = None
    event_sources: tuple[str, ...] | None = None
    min_duration_seconds: int | None = None
    max_duration_seconds: int | None = None
    not_before_within_seconds: int | None = None  # NotBefore - now <= this (an event without NotBefore: no)
    max_resources: int | None = None  # len(Resources) <= this: bounds the blast radius of one approval
    description_pattern: re.Pattern[str] | None = None  # re.search in Description

    def matches(self, event: ScheduledEvent, now: float) -> bool:
        duration = event.duration_seconds  # -1 (unknown) is below every bound, as bounds are >= 0
        within = self.not_before_within_seconds
        return all(
            (
                self.event_types is None or event.event_type in self.event_types,
                self.event_sources is None or event.event_source in self.event_sources,
                self.min_duration_seconds is None or 0 <= self.min_duration_seconds <= duration,
                self.max_duration_seconds is None or 0 <= duration <= self.max_duration_seconds,
                within is None or (event.not_before is not None and event.not_before.timestamp() - now <= within),
                self.max_resources is None or len(event.resources) <= self.max_resources,
                self.description_pattern is None or self.description_pattern.search(event.description) is not None,
            )
        )


@dataclass(frozen=True, slots=True)
class Hook:
    command: tuple[str, ...]
    timeout_seconds: float = DEFAULT_HOOK_TIMEOUT_SECONDS
    inherit_env: tuple[str, ...] = ()  # extra environment variables passed through to the hook


@dataclass(frozen=True, slots=True)
class Decision:
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

    @property
    def fingerprint(self) -> str:
        """Changes whenever what the policy decides or runs changes (not when only the file moves)."""
        text = repr((self.rules, self.dry_run, self.leader, self.hook))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def decide(self, event: ScheduledEvent, vm_name: str | None, now: float) -> Decision:
        if event.event_status != STATUS_SCHEDULED:
            return Decision(False, reason=NOT_SCHEDULED, detail=f"status is {event.event_status}, not Scheduled")
        if not vm_name:
            return Decision(False, reason=VM_NAME_UNKNOWN, detail="this VM's name is unknown, so approving is unsafe")
        # Azure resource names are case-insensitive.
        listed = [name.casefold() for name in event.resources]
        if vm_name.casefold() not in listed:
            return Decision(False, reason=NOT_THIS_VM, detail=f"{vm_name} is not in Resources {_names(event)}")
        if self.leader == LEADER_FIRST_RESOURCE and listed[0] != vm_name.casefold():
            detail = f"the leader is the first of Resources ({event.resources[0]}), not {vm_name}"
            return Decision(False, reason=NOT_LEADER, detail=detail)
        for rule in self.rules:
            if rule.matches(event, now):
                return Decision(True, rule=rule.name, detail=f"rule {rule.name} matched")
        detail = (
            f"no rule matched {event.event_type} from {event.event_source or 'unknown source'}, "
            f"DurationInSeconds {event.duration_seconds}, {len(event.resources)} resource(s)"
        )
        return Decision(False, reason=NO_RULE, detail=detail)


def _names(event: ScheduledEvent, limit: int = 5) -> str:
    shown = ", ".join(event.resources[:limit])
    more = len(event.resources) - limit
    return f"[{shown}{f', and {more} more' if more > 0 else ''}]"


def load_policy(path: str | os.PathLike[str]) -> Policy:
    """Read and validate a policy file; raise ``ConfigError`` naming the key and the problem."""
    source = os.fspath(path)
    data = load_yaml(source, config_file.read_text(KIND, source))
    if data is None:
        raise ConfigError(f"approval config {source}: the file is empty; it needs at least one rule")
    return parse_policy(data, source)


def parse_policy(data: object, source: str = "<policy>") -> Policy:
    """Validate an already-parsed policy document (the YAML file's content)."""
    top = Fields(source, "", data, _TOP_KEYS)
    if not top.has("rules"):
        top.fail("rules", "is required: a non-empty list of rules")
    raw_rules = top.data["rules"]
    if not isinstance(raw_rules, list) or not raw_rules:
        top.fail("rules", f"must be a non-empty list of rules, got {show(raw_rules)}")
    rules = tuple(_parse_rule(source, index, raw) for index, raw in enumerate(raw_rules))
    for index, rule in enumerate(rules):
        if any(other.name == rule.name for other in rules[:index]):
            top.fail_at(f"rules[{index}].name", f"{show(rule.name)} is used by an earlier rule; names must be unique")
    hook = _parse_hook(source, top.data["hook"]) if top.has("hook") else None
    return Policy(
        rules=rules,
        dry_run=top.boolean("dry_run", False),
        leader=top.choice("leader", LEADERS, LEADER_FIRST_RESOURCE),
        hook=hook,
        source=source,
    )


def _parse_rule(source: str, index: int, raw: object) -> Rule:
    fields = Fields(source, f"rules[{index}]", raw, ("name", *_MATCH_KEYS))
    name = fields.string("name", required=True)
    assert name is not None
    if not any(fields.has(key) for key in _MATCH_KEYS):
        fields.fail_at(
            fields.where,
            f"rule {show(name)} has no matching key and would match every event; use one of: " + ", ".join(_MATCH_KEYS),
        )
    low = fields.integer("min_duration_seconds", 0)
    high = fields.integer("max_duration_seconds", 0)
    if low is not None and high is not None and low > high:
        fields.fail("min_duration_seconds", f"{low} is greater than max_duration_seconds {high}")
    pattern = fields.string("description_pattern")
    try:
        compiled = re.compile(pattern) if pattern is not None else None
    except (re.error, OverflowError, RecursionError) as exc:  # "a{99999999999}", "((((...))))" nested deeply
        fields.fail("description_pattern", f"is not a valid regular expression: {exc}")
    return Rule(
        name=name,
        event_types=fields.string_list("event_types", choices=EVENT_TYPES),
        event_sources=fields.string_list("event_sources", choices=EVENT_SOURCES),
        min_duration_seconds=low,
        max_duration_seconds=high,
        not_before_within_seconds=fields.integer("not_before_within_seconds", 0),
        max_resources=fields.integer("max_resources", 1),
        description_pattern=compiled,
    )


def _parse_hook(source: str, raw: object) -> Hook:
    fields = Fields(source, "hook", raw, _HOOK_KEYS)
    command = fields.string_list("command", required=True)
    assert command is not None
    if shutil.which(command[0]) is None:
        fields.fail("command[0]", f"{show(command[0])} is not an executable file (nor found on PATH)")
    inherit = fields.string_list("inherit_env") or ()
    for index, name in enumerate(inherit):
        if not _ENV_NAME.fullmatch(name) or name.startswith("SE_EVENT_"):
            fields.fail(f"inherit_env[{index}]", f"{show(name)} is not an environment variable name to pass through")
    return Hook(
        command=command,
        timeout_seconds=fields.positive_number("timeout_seconds", DEFAULT_HOOK_TIMEOUT_SECONDS),
        inherit_env=inherit,
    )
