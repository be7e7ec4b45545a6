"""One rule of the approval policy: the keys that match an event (docs/approval.md) and which events it may
approve (its ``scope``)."""

from __future__ import annotations

import functools
from typing import Annotated, Any, Literal, get_args

import msgspec
import re2

from se_exporter.config.files import show
from se_exporter.config.schema import field_problem
from se_exporter.imds.document import (
    APPROVABLE_EVENT_TYPES,
    SPOT_REBALANCE_RECOMMENDATION,
    EventSourceName,
    EventTypeName,
    ScheduledEvent,
)
from se_exporter.imds.impact import Cause, Classification, Impact

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
                raise field_problem(f"{key}[{values.index(never)}]", f"{never} {NEVER_APPROVED}")
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
            raise field_problem(f"{key}[{index}]", f"{show(item)} is listed twice")
