"""The impact and cause classifier over every EventType x EventSource x Description case of docs/design.md."""

from __future__ import annotations

import json

import pytest

from se_exporter.imds.document import parse_document
from se_exporter.imds.impact import CAUSES, IMPACTS, Cause, Impact, classify

LIVE_MIGRATION = "Virtual machine is being paused because of a memory-preserving Live Migration operation."
HOST_MAINTENANCE = "Host server is undergoing maintenance."
FAILURE = "Virtual machine has encountered a failure."
USER_REBOOT = "Virtual machine is going to be restarted as requested by authorized user."

# (EventType, EventSource, Description, first seen status) -> (impact, cause)
CASES = [
    ("Freeze", "Platform", LIVE_MIGRATION, "Scheduled", "live_migration", "platform"),
    ("Freeze", "Platform", LIVE_MIGRATION.upper(), "Scheduled", "live_migration", "platform"),
    ("Freeze", "Platform", "live migration", "Started", "live_migration", "failure"),
    ("Freeze", "Platform", HOST_MAINTENANCE, "Scheduled", "pause", "platform"),
    ("Freeze", "User", "", "Scheduled", "pause", "user"),
    ("Freeze", "", "", "Scheduled", "pause", "unknown"),
    ("Reboot", "User", USER_REBOOT, "Scheduled", "reboot", "user"),
    ("Reboot", "Platform", HOST_MAINTENANCE, "Scheduled", "reboot", "platform"),
    ("Reboot", "Platform", HOST_MAINTENANCE, "Started", "reboot", "failure"),  # the hardware-failure path
    ("Reboot", "", "", "Started", "reboot", "failure"),  # older api-version, first seen Started
    ("Reboot", "", "", "Scheduled", "reboot", "unknown"),  # older api-version
    ("Redeploy", "Platform", FAILURE, "Scheduled", "redeploy", "failure"),
    ("Redeploy", "Platform", FAILURE.upper(), "Scheduled", "redeploy", "failure"),
    ("Redeploy", "User", "", "Scheduled", "redeploy", "user"),
    # automaticallyApprove: a user's reboot or redeploy is listed directly as Started; never a failure
    ("Reboot", "User", USER_REBOOT, "Started", "reboot", "user"),
    ("Redeploy", "User", "", "Started", "redeploy", "user"),
    ("Reboot", "User", FAILURE, "Started", "reboot", "user"),  # a user event, whatever its Description
    ("Redeploy", "Platform", HOST_MAINTENANCE, "Scheduled", "redeploy", "platform"),
    ("Preempt", "Platform", "", "Scheduled", "eviction", "platform"),
    ("Preempt", "", "", "Scheduled", "eviction", "unknown"),
    ("Terminate", "User", "", "Scheduled", "termination", "user"),
    ("Terminate", "Platform", "", "Scheduled", "termination", "platform"),
    ("Hibernate", "User", "", "Scheduled", "unknown", "user"),  # a type Azure may add one day
    ("freeze", "Platform", LIVE_MIGRATION, "Scheduled", "unknown", "platform"),  # EventType is case-sensitive
    ("Reboot", "Customer", "", "Scheduled", "reboot", "unknown"),  # an unknown EventSource
    ("Freeze", "Platform", HOST_MAINTENANCE, "Unknown", "pause", "platform"),  # an unknown first status
]


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-{c[1] or 'nosource'}-{c[3]}-{i}" for i, c in enumerate(CASES)])
def test_classify(case: tuple[str, str, str, str, str, str]) -> None:
    event_type, source, description, first_seen, impact, cause = case
    raw = {
        "EventId": "E",
        "EventType": event_type,
        "EventStatus": first_seen,
        "Resources": ["vm-a"],
        "NotBefore": "",
        "Description": description,
        "EventSource": source,
        "DurationInSeconds": 5,
    }
    event = parse_document(json.dumps({"DocumentIncarnation": 1, "Events": [raw]})).events[0]
    assert classify(event, first_seen) == (impact, cause)


def test_older_api_version_document_without_source_or_description() -> None:
    body = (
        '{"DocumentIncarnation": 3, "Events": [{"EventId": "A", "EventType": "Freeze", "EventStatus": "Scheduled",'
        ' "ResourceType": "VirtualMachine", "Resources": ["vm-a"], "NotBefore": "Mon, 11 Apr 2022 22:26:58 GMT"}]}'
    )
    event = parse_document(body).events[0]
    assert classify(event, "Scheduled") == (Impact.PAUSE, Cause.UNKNOWN)


def test_the_value_lists_are_the_contracts() -> None:
    assert IMPACTS == ("live_migration", "pause", "reboot", "redeploy", "eviction", "termination", "unknown")
    assert CAUSES == ("failure", "user", "platform", "unknown")
