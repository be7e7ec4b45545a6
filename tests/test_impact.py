"""The impact and cause classifier over every EventType x EventSource x Description case of docs/design.md."""

from __future__ import annotations

import json

import pytest

from se_exporter.imds.document import parse_document
from se_exporter.imds.impact import CAUSES, IMPACTS, Cause, Impact, classify

pytestmark = pytest.mark.pure

LIVE_MIGRATION = "Virtual machine is being paused because of a memory-preserving Live Migration operation."
HOST_MAINTENANCE = "Host server is undergoing maintenance."
FAILURE = "Virtual machine has encountered a failure."
USER_REBOOT = "Virtual machine is going to be restarted as requested by authorized user."

# (EventType, EventSource, Description, DurationInSeconds, appeared Started while watched) -> (impact, cause):
# docs/design.md's tables, to the letter of Azure's docs (issue 39).
CASES = [
    ("Freeze", "Platform", LIVE_MIGRATION, 5, False, "live_migration", "platform"),
    ("Freeze", "Platform", LIVE_MIGRATION.upper(), 5, False, "live_migration", "platform"),
    ("Freeze", "Platform", "live migration", 0, False, "live_migration", "platform"),  # a migration first
    ("Freeze", "Platform", HOST_MAINTENANCE, 5, False, "pause", "platform"),
    ("Freeze", "Platform", HOST_MAINTENANCE, -1, False, "pause", "platform"),  # unknown duration: a pause
    # "0: The event won't interrupt the VM or impact its availability (for example, update to the network)"
    ("Freeze", "Platform", HOST_MAINTENANCE, 0, False, "none", "platform"),
    ("Freeze", "User", "", 5, False, "pause", "user"),
    ("Freeze", "", "", 5, False, "pause", "unknown"),
    # A Freeze or a Preempt that appears Started is no failure by its status alone.
    ("Freeze", "Platform", HOST_MAINTENANCE, 5, True, "pause", "platform"),
    ("Preempt", "Platform", "", -1, True, "eviction", "platform"),
    ("Reboot", "User", USER_REBOOT, -1, False, "reboot", "user"),
    ("Reboot", "Platform", HOST_MAINTENANCE, -1, False, "reboot", "platform"),
    # "EventType = Reboot and EventStatus = Started" after a host's hardware failure (Redeploy in newer docs)
    ("Reboot", "Platform", HOST_MAINTENANCE, -1, True, "reboot", "failure"),
    ("Redeploy", "Platform", HOST_MAINTENANCE, -1, True, "redeploy", "failure"),
    ("Reboot", "", "", -1, True, "reboot", "failure"),  # older api-version, appeared Started
    ("Reboot", "", "", -1, False, "reboot", "unknown"),  # older api-version, or found Started at a first look
    ("Redeploy", "Platform", FAILURE, -1, False, "redeploy", "failure"),
    ("Redeploy", "Platform", FAILURE.upper(), -1, False, "redeploy", "failure"),
    ("Freeze", "Platform", FAILURE, 5, False, "pause", "failure"),  # a Description that reports one
    ("Redeploy", "User", "", -1, False, "redeploy", "user"),
    # automaticallyApprove: a user's reboot or redeploy is listed directly as Started; never a failure
    ("Reboot", "User", USER_REBOOT, -1, True, "reboot", "user"),
    ("Redeploy", "User", "", -1, True, "redeploy", "user"),
    ("Reboot", "User", FAILURE, -1, True, "reboot", "user"),  # a user event, whatever its Description
    ("Redeploy", "Platform", HOST_MAINTENANCE, -1, False, "redeploy", "platform"),
    ("Preempt", "Platform", "", -1, False, "eviction", "platform"),
    ("Preempt", "", "", -1, False, "eviction", "unknown"),
    ("Terminate", "User", "", -1, False, "termination", "user"),
    ("Terminate", "Platform", "", -1, True, "termination", "platform"),
    # A Spot eviction-risk notice (listed Advisory): nothing is lost yet, a Preempt may follow.
    ("SpotRebalanceRecommendation", "Platform", "", -1, False, "eviction_risk", "platform"),
    ("SpotRebalanceRecommendation", "", "", -1, True, "eviction_risk", "unknown"),  # no failure by its status
    ("Hibernate", "User", "", -1, False, "unknown", "user"),  # a type Azure may add one day
    ("freeze", "Platform", LIVE_MIGRATION, 5, False, "unknown", "platform"),  # EventType is case-sensitive
    ("Reboot", "Customer", "", -1, True, "reboot", "unknown"),  # an unknown EventSource
]


@pytest.mark.parametrize(
    "case", CASES, ids=[f"{c[0]}-{c[1] or 'nosource'}-{c[3]}-{c[4]}-{i}" for i, c in enumerate(CASES)]
)
def test_classify(case: tuple[str, str, str, int, bool, str, str]) -> None:
    event_type, source, description, duration, appeared_started, impact, cause = case
    raw = {
        "EventId": "E",
        "EventType": event_type,
        "EventStatus": "Started" if appeared_started else "Scheduled",
        "Resources": ["vm-a"],
        "NotBefore": "",
        "Description": description,
        "EventSource": source,
        "DurationInSeconds": duration,
    }
    event = parse_document(json.dumps({"DocumentIncarnation": 1, "Events": [raw]})).events[0]
    assert classify(event, appeared_started=appeared_started) == (impact, cause)


def test_older_api_version_document_without_source_or_description() -> None:
    body = (
        '{"DocumentIncarnation": 3, "Events": [{"EventId": "A", "EventType": "Freeze", "EventStatus": "Scheduled",'
        ' "ResourceType": "VirtualMachine", "Resources": ["vm-a"], "NotBefore": "Mon, 11 Apr 2022 22:26:58 GMT"}]}'
    )
    event = parse_document(body).events[0]
    assert classify(event) == (Impact.PAUSE, Cause.UNKNOWN)


def test_the_value_lists_are_the_contracts() -> None:
    assert IMPACTS == (
        "live_migration",
        "pause",
        "none",
        "reboot",
        "redeploy",
        "eviction",
        "termination",
        "eviction_risk",
        "unknown",
    )
    assert CAUSES == ("failure", "user", "platform", "unknown")
