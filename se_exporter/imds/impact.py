"""What an event will do to the VM (its impact) and why it comes (its cause): docs/design.md.

EventType alone does not answer "will this hurt?": a Freeze may be a memory-preserving Live
Migration or host maintenance, a Reboot may follow a hardware failure. ``classify`` is a pure
function of the event's fields and of how the exporter first saw it; it never fails (an unknown
EventType is impact ``unknown``), so a new Azure event kind is shown, not dropped.
"""

from __future__ import annotations

from enum import StrEnum
from typing import NamedTuple

from se_exporter.imds.document import STARTED, ScheduledEvent


class Impact(StrEnum):
    LIVE_MIGRATION = "live_migration"  # a pause of seconds while memory moves to another host
    PAUSE = "pause"  # any other Freeze: paused, nothing lost
    REBOOT = "reboot"  # memory lost, disks kept
    REDEPLOY = "redeploy"  # memory and the temporary disk lost: the VM moves host
    EVICTION = "eviction"  # a Spot VM deallocated or deleted (about 30 s notice)
    TERMINATION = "termination"  # the VM itself goes (scale-in or delete)
    UNKNOWN = "unknown"


class Cause(StrEnum):
    FAILURE = "failure"  # first seen Started from the platform (the hardware-failure path), or a Description saying so
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
}
_CAUSE_BY_SOURCE = {"User": Cause.USER, "Platform": Cause.PLATFORM}
# Microsoft's wording (Azure's mock server and the docs); matched case-insensitively.
LIVE_MIGRATION_TEXT = "live migration"
FAILURE_TEXT = "has encountered a failure"


class Classification(NamedTuple):
    impact: Impact
    cause: Cause


def classify(event: ScheduledEvent, first_seen_status: str) -> Classification:
    """The event's impact and cause; ``first_seen_status`` is the status of the exporter's first sighting.

    The store calls it only when an event is new or changed (never per poll or per scrape), so a long
    Description costs once.
    """
    folded = event.description.casefold()
    if event.event_type == "Freeze":
        impact = Impact.LIVE_MIGRATION if LIVE_MIGRATION_TEXT in folded else Impact.PAUSE
    else:
        impact = _IMPACT_BY_TYPE.get(event.event_type, Impact.UNKNOWN)
    return Classification(impact, _cause(event, first_seen_status, folded))


def _cause(event: ScheduledEvent, first_seen_status: str, folded_description: str) -> Cause:
    # A user's own reboot or redeploy appears directly as Started where the VM or scale set sets
    # scheduledEventsPolicy ... automaticallyApprove: a user event is never a failure.
    if event.event_source == "User":
        return Cause.USER
    if first_seen_status == STARTED or FAILURE_TEXT in folded_description:
        return Cause.FAILURE
    return _CAUSE_BY_SOURCE.get(event.event_source, Cause.UNKNOWN)
