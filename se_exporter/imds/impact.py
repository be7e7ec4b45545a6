"""What an event will do to the VM (its impact) and why it comes (its cause): docs/design.md.

EventType alone does not answer "will this hurt?": a Freeze may be a memory-preserving Live
Migration, host maintenance or nothing at all (DurationInSeconds 0: "won't interrupt the VM or impact
its availability", Azure's docs), a Reboot may follow a hardware failure. ``classify`` is a pure
function of the event's fields and of how the exporter first saw it; it never fails (an unknown
EventType is impact ``unknown``), so a new Azure event kind is shown, not dropped.

The failure path, as Azure documents it: after a host's hardware failure, the affected VMs get an event
"with EventType = Reboot and EventStatus = Started" (Redeploy in current revisions), skipping Scheduled.
So a Reboot or Redeploy from the platform (or of unknown source) that *appeared* already Started while
the exporter was watching is a ``failure``; one merely found Started at the first look after a start
without a state file may have been scheduled long before, and takes its cause from its source. A Freeze or
a Preempt is never a failure by its status alone; a Description that reports one makes any event one.
"""

from __future__ import annotations

from enum import StrEnum
from typing import NamedTuple

from se_exporter.imds.document import ScheduledEvent


class Impact(StrEnum):
    LIVE_MIGRATION = "live_migration"  # a pause of seconds while memory moves to another host
    PAUSE = "pause"  # any other Freeze but one of DurationInSeconds 0: paused, nothing lost
    NONE = "none"  # a Freeze of DurationInSeconds 0: Azure says it does not interrupt the VM
    REBOOT = "reboot"  # memory lost, disks kept
    REDEPLOY = "redeploy"  # memory and the temporary disk lost: the VM moves host
    EVICTION = "eviction"  # a Spot VM deallocated or deleted (about 30 s notice)
    TERMINATION = "termination"  # the VM itself goes (scale-in or delete)
    # A Spot eviction-risk notice (SpotRebalanceRecommendation): nothing is lost yet, a Preempt may follow.
    EVICTION_RISK = "eviction_risk"
    UNKNOWN = "unknown"


class Cause(StrEnum):
    FAILURE = (
        "failure"  # a Reboot/Redeploy that appeared Started (the hardware-failure path), or a Description saying so
    )
    USER = "user"  # EventSource User: never a failure, even when first seen Started (automaticallyApprove)
    PLATFORM = "platform"  # EventSource Platform
    UNKNOWN = "unknown"  # older api-versions without EventSource


IMPACTS: tuple[str, ...] = tuple(Impact)
CAUSES: tuple[str, ...] = tuple(Cause)
# Impacts after which the VM is not the same running machine: they page (alerts/), warn in the audit trail
# and, by default, take the VM out of a load balancer (/-/traffic). In this order wherever they are listed.
DISRUPTIVE_IMPACTS: tuple[Impact, ...] = (Impact.REBOOT, Impact.REDEPLOY, Impact.EVICTION, Impact.TERMINATION)
# A pause of seconds, nothing lost: worth a warning (pause) or a note (live_migration), never a page.
PAUSE_IMPACTS: tuple[Impact, ...] = (Impact.PAUSE, Impact.LIVE_MIGRATION)

_IMPACT_BY_TYPE = {
    "Reboot": Impact.REBOOT,
    "Redeploy": Impact.REDEPLOY,
    "Preempt": Impact.EVICTION,
    "Terminate": Impact.TERMINATION,
    "SpotRebalanceRecommendation": Impact.EVICTION_RISK,
}
_CAUSE_BY_SOURCE = {"User": Cause.USER, "Platform": Cause.PLATFORM}
# Microsoft's wording (Azure's mock server and the docs); matched case-insensitively.
LIVE_MIGRATION_TEXT = "live migration"
FAILURE_TEXT = "has encountered a failure"
FAILURE_TYPES = ("Reboot", "Redeploy")  # what the hardware-failure path lists, already Started


class Classification(NamedTuple):
    impact: Impact
    cause: Cause


def classify(event: ScheduledEvent, *, appeared_started: bool = False) -> Classification:
    """The event's impact and cause; ``appeared_started``: the exporter, watching, saw it first as Started.

    The store calls it only when an event is new or changed (never per poll or per scrape), so a long
    Description costs once.
    """
    folded = event.description.casefold()
    if event.event_type == "Freeze":
        if LIVE_MIGRATION_TEXT in folded:
            impact = Impact.LIVE_MIGRATION
        else:
            impact = Impact.NONE if event.duration_seconds == 0 else Impact.PAUSE
    else:
        impact = _IMPACT_BY_TYPE.get(event.event_type, Impact.UNKNOWN)
    return Classification(impact, _cause(event, appeared_started, folded))


def _cause(event: ScheduledEvent, appeared_started: bool, folded_description: str) -> Cause:
    # A user's own reboot or redeploy appears directly as Started where the VM or scale set sets
    # scheduledEventsPolicy ... automaticallyApprove: a user event is never a failure.
    if event.event_source == "User":
        return Cause.USER
    if FAILURE_TEXT in folded_description:
        return Cause.FAILURE
    if appeared_started and event.event_type in FAILURE_TYPES and event.event_source in ("Platform", ""):
        return Cause.FAILURE
    return _CAUSE_BY_SOURCE.get(event.event_source, Cause.UNKNOWN)
