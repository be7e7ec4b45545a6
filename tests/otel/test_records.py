"""Log records as docs/design.md fixes them, and the OTEL_* configuration as the standard defines it."""

from __future__ import annotations

import io
import json
import logging
from datetime import UTC, datetime

import pytest

from se_exporter import logs
from se_exporter.approval.decision import ApprovalDecision, ApprovalResult
from se_exporter.audit.records import approval_record, transition_record
from se_exporter.audit.trail import AuditTrail
from se_exporter.errors import ConfigError
from se_exporter.imds.document import Document, ScheduledEvent
from se_exporter.imds.identity import VMIdentity
from se_exporter.otel.config import parse_otel_environment, resource_attributes
from se_exporter.poller import PollResult
from se_exporter.store import EventStore
from se_exporter.store.lifecycle import Transition

T0 = 1_750_000_000.0
NOT_BEFORE = datetime.fromtimestamp(T0 + 900, UTC)
REBOOT = ScheduledEvent(
    "E1",
    "Reboot",
    "Scheduled",
    resources=("vm-a", "vm-b"),
    not_before=NOT_BEFORE,
    description="Host update",
    event_source="Platform",
    duration_seconds=-1,
)
COMPUTE = VMIdentity(
    name="vm-a",
    vm_id="0000-1",
    location="westeurope",
    subscription_id="sub-1",
    resource_id="/subscriptions/sub-1/vm-a",
    vm_size="Standard_D2s_v5",
)


def transitions_of(*documents: Document) -> list[Transition]:
    store = EventStore()
    return [t for i, d in enumerate(documents) for t in store.reconcile(d, T0 + i)]


def test_transition_record_carries_every_attribute_with_its_type() -> None:
    scheduled, started, completed = transitions_of(
        Document(1, (REBOOT,)),
        Document(
            2,
            (
                ScheduledEvent(
                    "E1",
                    "Reboot",
                    "Started",
                    resources=("vm-a", "vm-b"),
                    description="Host update",
                    event_source="Platform",
                ),
            ),
        ),
        Document(3),
    )
    record = transition_record(scheduled, VMIdentity(name="VM-A"))
    assert record.event_name == "scheduled_event.transition" and record.severity == "WARN"
    assert record.timestamp_ns == int(T0 * 1e9)
    assert record.attributes == {
        "scheduled_event.transition": "scheduled",
        "scheduled_event.id": "E1",
        "scheduled_event.type": "Reboot",
        "scheduled_event.status": "Scheduled",
        "scheduled_event.previous_status": "",
        "scheduled_event.source": "Platform",
        "scheduled_event.resources": ("vm-a", "vm-b"),
        "scheduled_event.not_before": "2025-06-15T15:21:40Z",
        "scheduled_event.duration_s": -1,
        "scheduled_event.description": "Host update",
        "scheduled_event.document_incarnation": 1,
        "scheduled_event.impact": "reboot",
        "scheduled_event.cause": "platform",
        "scheduled_event.affects_this_vm": True,
        "log.record.uid": scheduled.uid,
    }
    assert "not before 2025-06-15T15:21:40Z" in record.body and "affects this VM" in record.body
    done = transition_record(completed, VMIdentity(name="vm-z"))
    assert done.severity == "INFO" and done.attributes["scheduled_event.affects_this_vm"] is False
    assert done.attributes["scheduled_event.started_s"] == 1.0 and "scheduled_event.not_before" not in done.attributes
    assert transition_record(started, VMIdentity()).severity == "WARN"


def test_an_update_in_place_says_what_changed_and_warns_when_it_becomes_disruptive() -> None:
    freeze = ScheduledEvent(
        "E1",
        "Freeze",
        "Scheduled",
        resources=("vm-b",),
        not_before=NOT_BEFORE,
        event_source="Platform",
        duration_seconds=5,
    )
    _, updated = transitions_of(Document(1, (freeze,)), Document(2, (REBOOT,)))
    record = transition_record(updated, VMIdentity(name="vm-a"))
    assert record.severity == "WARN" and record.attributes["scheduled_event.transition"] == "updated"
    assert record.attributes["scheduled_event.changes"] == (
        "the event changed (EventType Freeze -> Reboot; Resources [vm-b] -> [vm-a, vm-b]; "
        "DurationInSeconds 5 -> -1; Description (none) -> Host update)"
    )
    assert record.body.startswith("Reboot updated in place: (EventType Freeze -> Reboot; ")
    assert record.body.endswith(", affects this VM (impact reboot, cause platform, source Platform)")


def test_unknown_vm_name_leaves_affects_this_vm_out_and_uid_is_stable() -> None:
    (scheduled,) = transitions_of(Document(1, (REBOOT,)))
    record = transition_record(scheduled, VMIdentity())
    assert "scheduled_event.affects_this_vm" not in record.attributes
    (again,) = transitions_of(Document(7, (REBOOT,)))
    assert transition_record(again, VMIdentity()).uid == record.uid, "a re-emission must be recognisable"


@pytest.mark.parametrize(
    ("event_type", "severity"), [("Freeze", "INFO"), ("Preempt", "WARN"), ("Terminate", "WARN"), ("Redeploy", "WARN")]
)
def test_only_disruptive_events_warn(event_type: str, severity: str) -> None:
    (scheduled,) = transitions_of(Document(1, (ScheduledEvent("E1", event_type, "Scheduled"),)))
    assert transition_record(scheduled, VMIdentity()).severity == severity


@pytest.mark.parametrize(
    ("result", "severity"), [("approved", "INFO"), ("dry_run", "INFO"), ("failed", "ERROR"), ("hook_failed", "WARN")]
)
def test_approval_record(result: str, severity: str) -> None:
    decision = ApprovalDecision(REBOOT, ApprovalResult(result), "user-initiated", "because", 0.25, T0)
    record = approval_record(decision)
    assert record.event_name == "scheduled_event.approval" and record.severity == severity
    assert record.timestamp_ns == int(T0 * 1e9)
    assert {k: v for k, v in record.attributes.items() if k != "log.record.uid"} == {
        "scheduled_event.id": "E1",
        "scheduled_event.type": "Reboot",
        "scheduled_event.approval.result": result,
        "scheduled_event.approval.rule": "user-initiated",
        "scheduled_event.approval.reason": "because",
        "scheduled_event.approval.post_latency_s": 0.25,
    }


@pytest.mark.parametrize(
    ("environ", "traces", "logs"),
    [
        ({}, "none", "none"),
        ({"OTEL_SERVICE_NAME": "x", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "none", "none"),  # nothing says where
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, "otlp", "otlp"),
        ({"OTEL_EXPORTER_OTLP_LOGS_ENDPOINT": "http://c:4318/v1/logs"}, "none", "otlp"),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, "otlp", "none"),
        ({"OTEL_LOGS_EXPORTER": "console"}, "none", "console"),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "none"}, "none", "otlp"),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "true"}, "otlp", "otlp"),
    ],
)
def test_export_is_off_unless_asked_for(environ: dict[str, str], traces: str, logs: str) -> None:
    config = parse_otel_environment(environ)
    assert (config.traces.exporter, config.logs.exporter) == (traces, logs)
    assert config.enabled == (not config.disabled and (traces, logs) != ("none", "none"))


def test_standard_variables_configure_each_signal() -> None:
    config = parse_otel_environment(
        {
            "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318/",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://tempo:4318/custom/path",
            "OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer%20abc,x-tenant=t1",
            "OTEL_EXPORTER_OTLP_LOGS_TIMEOUT": "2500",
            "OTEL_EXPORTER_OTLP_COMPRESSION": "gzip",
            "OTEL_TRACES_EXPORTER": "console",
        }
    )
    assert config.logs.endpoint == "http://collector:4318/v1/logs", "the generic endpoint gets the signal path"
    assert config.traces.endpoint == "http://tempo:4318/custom/path", "a per-signal endpoint is used as-is"
    assert config.logs.headers == {"authorization": "Bearer abc", "x-tenant": "t1"}
    assert config.logs.timeout == 2.5 and config.traces.timeout == 10.0, "milliseconds, per the specification"
    assert config.logs.compression == "gzip" and config.traces.exporter == "console"
    grpc = parse_otel_environment({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_LOGS_EXPORTER": "otlp"})
    assert grpc.logs.endpoint == "http://localhost:4317" and grpc.enabled and grpc.traces.exporter == "none"
    assert not parse_otel_environment({"OTEL_SDK_DISABLED": "TRUE"}).enabled
    assert not parse_otel_environment({"OTEL_TRACES_EXPORTER": "none", "OTEL_LOGS_EXPORTER": "none"}).enabled


@pytest.mark.parametrize(
    "environ",
    [
        {"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"},
        {"OTEL_LOGS_EXPORTER": "zipkin"},
        {"OTEL_EXPORTER_OTLP_TIMEOUT": "soon"},
        {"OTEL_RESOURCE_ATTRIBUTES": "team=sre,broken"},
    ],
)
def test_a_bad_value_names_the_variable(environ: dict[str, str]) -> None:
    with pytest.raises(ConfigError, match=next(iter(environ))):
        parse_otel_environment(environ)


def test_resource_from_compute_metadata_and_user_attributes() -> None:
    config = parse_otel_environment(
        {"OTEL_RESOURCE_ATTRIBUTES": "host.name=node-7,team=sre,service.name=x", "OTEL_SERVICE_NAME": "se-prod"}
    )
    attributes = resource_attributes(config, COMPUTE, "1.2.3")
    assert attributes == {
        "service.name": "se-prod",
        "service.version": "1.2.3",
        "host.name": "node-7",
        "host.id": "0000-1",
        "host.type": "Standard_D2s_v5",
        "cloud.provider": "azure",
        "cloud.platform": "azure.vm",
        "cloud.region": "westeurope",
        "cloud.account.id": "sub-1",
        "cloud.resource_id": "/subscriptions/sub-1/vm-a",
        "team": "sre",
    }
    bare = resource_attributes(parse_otel_environment({}), VMIdentity(name="vm-a"), "1.2.3")
    assert bare == {"service.name": "se-exporter", "service.version": "1.2.3", "host.name": "vm-a"}


def stderr_line(level: str, fmt: str) -> str:
    stream = io.StringIO()
    handler = logs.configure(level, fmt, stream)
    try:
        (failure,) = transitions_of(
            Document(1, (ScheduledEvent("HW", "Reboot", "Started", resources=("vm-a",), event_source="Platform"),))
        )
        trail = AuditTrail()
        trail.on_poll(PollResult(Document(1), [failure], (), True, VMIdentity(name="vm-a"), T0))
    finally:
        logging.getLogger("se_exporter").removeHandler(handler)
    return stream.getvalue()


def test_a_transition_is_one_short_line_on_a_terminal_that_says_its_impact_and_cause() -> None:
    """About 770 characters a line once: every attribute, at info level."""
    line = stderr_line("info", "logfmt")
    assert line.endswith(
        ' msg="Reboot started, affects this VM (impact reboot, cause failure, source Platform)"'
        " event=scheduled_event.transition scheduled_event.transition=started scheduled_event.id=HW\n"
    )
    assert len(line) < 250


def test_every_field_of_a_transition_at_debug_level_and_in_json() -> None:
    debug = stderr_line("debug", "logfmt")
    assert "scheduled_event.impact=reboot scheduled_event.cause=failure" in debug
    assert debug.count("scheduled_event.id=HW") == 1
    record = json.loads(stderr_line("info", "json"))
    assert record["scheduled_event.impact"] == "reboot" and record["scheduled_event.resources"] == ["vm-a"]
