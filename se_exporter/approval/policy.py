"""The approval policy: which Scheduled Events this VM may approve, and the file that says so.

The file's shape is declared once, as the types below (see ``config.schema``): a mistake is a
start-up error naming the key. ``Policy.decide`` is a pure function of one event, this VM's name
and the time, returning a ``Verdict``: a candidate for approval, or a skip with its reason.

A ``Rule`` holds the keys that match an event (docs/approval.md) and which events it may approve (its
``scope``). Every decision the approver makes on an event (the first, after a hook, before each POST
attempt) comes from ``PolicyVerdicts``: the policy's verdict with the event's impact and cause, no approval
while the state file cannot be saved, and which skips hold until the event or this VM's name changes.
"""

from __future__ import annotations

import functools
import hashlib
import math
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal, get_args

import msgspec
import re2

from se_exporter.approval.ledger import LedgerEntry, event_revision
from se_exporter.common.files import read_text
from se_exporter.config.schema import CommandWord, check_command, decode, field_problem
from se_exporter.config.strict_yaml import load_yaml
from se_exporter.errors import ConfigError, show
from se_exporter.imds.document import (
    APPROVABLE_EVENT_TYPES,
    SCHEDULED,
    SPOT_REBALANCE_RECOMMENDATION,
    EventSourceName,
    EventTypeName,
    ScheduledEvent,
)
from se_exporter.imds.impact import Cause, Classification, Impact, classify
from se_exporter.lifecycle.transitions import EventState

Scope = Literal["self", "group"]


SCOPE_SELF, SCOPE_GROUP = get_args(Scope)


_Name = Annotated[str, msgspec.Meta(min_length=1, pattern=r"\S")]

_Count = Annotated[int, msgspec.Meta(ge=0)]


# A Spot eviction-risk notice is listed like an event, but Azure starts nothing when one is acknowledged.
NEVER_APPROVED = (
    "is never approved: acknowledging a Spot eviction-risk notice (SpotRebalanceRecommendation) does nothing; "
    "use an action (--actions.config) to move work off the VM"
)


# Accepted by the type, so that naming one is explained (NEVER_APPROVED), but never offered in "must be one of".
_RuleEventType = Annotated[
    EventTypeName, msgspec.Meta(description=f"one of {', '.join(sorted(APPROVABLE_EVENT_TYPES))}")
]


_RuleImpact = Annotated[
    Impact,
    msgspec.Meta(description=f"one of {', '.join(i.value for i in Impact if i is not Impact.EVICTION_RISK)}"),
]


MATCH_KEYS = (
    "event_types",
    "event_sources",
    "impacts",
    "causes",
    "min_duration_seconds",
    "max_duration_seconds",
    "not_before_within_seconds",
    "max_resources",
    "description_pattern",
)


class Rule(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Matches an event when every key that is set matches (unset keys match anything)."""

    name: _Name
    event_types: Annotated[tuple[_RuleEventType, ...], msgspec.Meta(min_length=1)] | None = None
    event_sources: Annotated[tuple[EventSourceName, ...], msgspec.Meta(min_length=1)] | None = None
    impacts: Annotated[tuple[_RuleImpact, ...], msgspec.Meta(min_length=1)] | None = None  # see imds.impact
    causes: Annotated[tuple[Cause, ...], msgspec.Meta(min_length=1)] | None = None
    min_duration_seconds: _Count | None = None
    max_duration_seconds: _Count | None = None
    not_before_within_seconds: _Count | None = None  # NotBefore - now <= this (an event without NotBefore: no)
    max_resources: Annotated[int, msgspec.Meta(ge=1)] | None = None  # bounds the blast radius of one approval
    description_pattern: _Name | None = None  # an RE2 search in Description (linear time, whatever it says)
    # Not a match key: which events the rule may approve. "self": those listing this VM; "group": also those
    # that reach this VM without listing it (its availability set's or placement group's), for the VMs the
    # policy names in group_approvers (Azure's primary/secondary approver pattern).
    scope: Scope = SCOPE_SELF

    def __post_init__(self) -> None:
        if all(getattr(self, key) is None for key in MATCH_KEYS):
            raise ValueError(
                f"rule {show(self.name)} has no matching key and would match every event; "
                f"use one of: {', '.join(MATCH_KEYS)}"
            )
        low, high = self.min_duration_seconds, self.max_duration_seconds
        if low is not None and high is not None and low > high:
            raise field_problem("min_duration_seconds", f"{low} is greater than max_duration_seconds {high}")
        for key in ("event_types", "event_sources", "impacts", "causes"):
            distinct(key, getattr(self, key) or ())
        for key, never in (("event_types", SPOT_REBALANCE_RECOMMENDATION), ("impacts", Impact.EVICTION_RISK)):
            if never in (values := getattr(self, key) or ()):
                raise field_problem(key, f"{never} {NEVER_APPROVED}", values.index(never))
        if self.description_pattern is not None:
            try:
                compiled_pattern(self.description_pattern)
            except re2.error as exc:  # "(a)\\1", "a{99999}", "((((...))))"
                raise field_problem(
                    "description_pattern", f"is not a valid RE2 regular expression: {_re2_problem(exc)}"
                ) from None

    def matches(self, event: ScheduledEvent, classification: Classification, now: float) -> bool:
        duration = event.duration_seconds  # -1 (unknown) is below every bound, as bounds are >= 0
        within = self.not_before_within_seconds
        return all(
            (
                self.event_types is None or event.event_type in self.event_types,
                self.event_sources is None or event.event_source in self.event_sources,
                self.impacts is None or classification.impact in self.impacts,
                self.causes is None or classification.cause in self.causes,
                self.min_duration_seconds is None or 0 <= self.min_duration_seconds <= duration,
                self.max_duration_seconds is None or 0 <= duration <= self.max_duration_seconds,
                within is None or (event.not_before is not None and event.not_before.timestamp() - now <= within),
                self.max_resources is None or len(event.resources) <= self.max_resources,
                self.description_pattern is None
                or compiled_pattern(self.description_pattern).search(event.description) is not None,
            )
        )


def _re2_problem(error: Exception) -> str:
    first = error.args[0] if error.args else error
    return first.decode("utf-8", "replace") if isinstance(first, bytes) else str(first)


@functools.lru_cache(maxsize=64)
def compiled_pattern(pattern: str) -> Any:
    """``description_pattern`` compiled by RE2: matching takes time linear in the Description, whatever the
    pattern (Python's ``re`` held the GIL for seconds on ``.*x`` and a 100 KB Description)."""
    options = re2.Options()
    options.log_errors = False  # the error is ours to report, with the key's path
    return re2.compile(pattern, options)


def distinct(key: str, items: tuple[str, ...]) -> None:
    for index, item in enumerate(items):
        if item in items[:index]:
            raise field_problem(key, f"{show(item)} is listed twice", index)


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
                raise field_problem("inherit_env", f"{show(name)} is set by se-exporter itself", index)


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
                    "rules",
                    "group needs group_approvers, the VMs that approve for their group (Azure's primary and "
                    "secondary), or every VM of the set would approve at once",
                    index,
                    ".scope",
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


NOT_LISTED = "not_listed"  # skip reason when an event disappears while its hook runs


# Skip reason when the event changed (another revision: Resources, type, NotBefore…) after the policy matched
# it and its hook ran, before the POST: an approval is for exactly what was decided, so it is decided again.
CHANGED = "changed"

STATE_UNSAVED = "state_unsaved"  # skip reason while the state file cannot be saved (see ``can_remember``)

STABLE_SKIPS = frozenset({NOT_SCHEDULED, NOT_THIS_VM, NOT_LEADER})  # hold until the event or the VM name changes


class PolicyVerdicts:
    def __init__(self, policy: Policy, can_remember: Callable[[], bool]) -> None:
        self.policy = policy
        # False while the state file cannot be saved: an approval made then would be forgotten by a
        # restart, which would approve (and run the hook) again. Nothing is started until it can.
        self._can_remember = can_remember

    def decide(self, state: EventState, vm_name: str | None, now: float) -> Verdict:
        """The policy's verdict on a listed event, with its impact and cause; no candidate while the state
        file cannot be saved."""
        verdict = self.policy.decide(state.event, vm_name, now, Classification(state.impact, state.cause))
        if verdict.candidate and not self._can_remember():
            return Verdict(
                False,
                reason=STATE_UNSAVED,
                detail=f"{verdict.detail}, but the state file cannot be "
                "saved: approving now could approve twice after a restart",
            )
        return verdict

    def stable(self, reason: str) -> bool:
        """Whether a skip for ``reason`` holds until the event or this VM's name changes (the time aside)."""
        return reason in STABLE_SKIPS or (reason == NO_RULE and not self.policy.time_dependent)


def revision(entry: LedgerEntry | None, event: ScheduledEvent) -> str:
    """``event_revision(event)``, computed once per event object (the store hands back the same one while
    the event is unchanged)."""
    if entry is not None and entry.seen is event:
        return entry.seen_revision
    computed = event_revision(event)
    if entry is not None:
        entry.seen, entry.seen_revision = event, computed
    return computed


def past_not_before(event: ScheduledEvent, now: float) -> float | None:
    """Seconds since the event's NotBefore, or None while it is still ahead (or the event has none)."""
    if event.not_before is None or (late := now - event.not_before.timestamp()) < 0:
        return None
    return late
