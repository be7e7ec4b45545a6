"""An event that changes in place (issue 22, point 13): the same EventId goes from a Freeze of another VM
to a Terminate of this one. /metrics followed it, but no transition, line or OTLP record said so, and the
audit trail still told of a Freeze."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.otlp import OTLPHttpReceiver
from tests.support.exporter_process import ExporterProcess
from tests.support.exposition import value
from tests.support.fake_imds import FakeIMDS, document
from tests.support.wait import wait_for

pytestmark = pytest.mark.posix

FREEZE = {
    "EventId": "E1",
    "EventType": "Freeze",
    "ResourceType": "VirtualMachine",
    "Resources": ["vm-b"],
    "EventStatus": "Scheduled",
    "NotBefore": "Mon, 11 Apr 2099 22:26:58 GMT",
    "Description": "",
    "EventSource": "Platform",
    "DurationInSeconds": 5,
}
TERMINATE = {**FREEZE, "EventType": "Terminate", "Resources": ["vm-a"], "DurationInSeconds": -1}


def test_a_change_in_place_is_a_transition_a_line_and_a_record(
    fake_imds: FakeIMDS, start_exporter: Callable[..., ExporterProcess], otlp_http_receiver: OTLPHttpReceiver
) -> None:
    current = [document(1, FREEZE)]
    fake_imds.respond = lambda seen: current[0]
    exporter = start_exporter(
        f"--imds.url={fake_imds.url}",
        "--poll.interval=250ms",
        "--vm.name=vm-a",
        env={**otlp_http_receiver.env, "OTEL_TRACES_EXPORTER": "none"},
    )
    otlp_http_receiver.wait_for_logs(event_name="scheduled_event.transition", timeout=20)
    current[0] = document(2, TERMINATE)
    (record,) = otlp_http_receiver.wait_for_logs(
        lambda r: r.attributes.get("scheduled_event.transition") == "updated", timeout=20
    )
    assert record.attributes["scheduled_event.type"] == "Terminate"
    assert record.attributes["scheduled_event.affects_this_vm"] is True
    assert record.attributes["scheduled_event.impact"] == "termination"
    assert record.attributes["scheduled_event.changes"] == (
        "the event changed (EventType Freeze -> Terminate; Resources [vm-b] -> [vm-a]; DurationInSeconds 5 -> -1)"
    )
    assert record.severity_text == "WARN"
    text = exporter.metrics()
    assert value(text, "azure_scheduled_events_transitions_total", event_type="Terminate", transition="updated") == 1
    wait_for(lambda: "Terminate updated in place" in exporter.logs(), 10, "the line on stderr")
    assert exporter.stop() == 0
