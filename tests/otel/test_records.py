"""Log records as docs/design.md fixes them, and the OTEL_* configuration as the standard defines it."""

from __future__ import annotations

import io
import json
import logging
from datetime import UTC, datetime

import pytest

from se_exporter import logs
from se_exporter.approval.ledger import ApprovalDecision, ApprovalResult
from se_exporter.audit.records import AuditTrail, approval_record, transition_record
from se_exporter.errors import ConfigError
from se_exporter.imds.document import Document, ScheduledEvent, VMIdentity
from se_exporter.lifecycle import EventStore
from se_exporter.lifecycle.transitions import Transition
from se_exporter.otel.config import parse_otel_environment, resource_attributes
from se_exporter.poller import PollResult

pytestmark = pytest.mark.pure

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
    ("vm_name", "severity"),
    [
        pytest.param("vm-a", "WARN", id="listed: this VM"),
        pytest.param("", "WARN", id="this VM's name unknown"),
        pytest.param("WestNO_1", "INFO", id="another VM of the set"),
    ],
)
@pytest.mark.parametrize("event_type", ["Reboot", "Redeploy", "Preempt", "Terminate"])
def test_another_vms_event_is_information_whatever_its_type(event_type: str, vm_name: str, severity: str) -> None:
    """Azure's docs: events for an availability set or a placement group go to every VM in it; check
    Resources. An event that lists only another VM is no warning about this one."""
    event = ScheduledEvent("E1", event_type, "Scheduled", resources=("vm-a",), event_source="Platform")
    (scheduled,) = transitions_of(Document(1, (event,)))
    record = transition_record(scheduled, VMIdentity(name=vm_name))
    assert record.severity == severity
    if vm_name == "WestNO_1":
        impact = record.attributes["scheduled_event.impact"]
        assert record.body.endswith(f"does not affect this VM (impact {impact}, cause platform, source Platform)")


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


HTTP, GRPC = ("otlp_proto_http",), ("otlp_proto_grpc",)


@pytest.mark.parametrize(
    ("environ", "traces", "logs"),
    [
        ({}, (), ()),
        ({"OTEL_SERVICE_NAME": "x", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, (), ()),  # nothing says where
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, HTTP, HTTP),
        ({"OTEL_EXPORTER_OTLP_LOGS_ENDPOINT": "http://c:4318/v1/logs"}, (), HTTP),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, HTTP, ()),
        ({"OTEL_LOGS_EXPORTER": "console"}, (), ("console",)),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "none"}, (), HTTP),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, GRPC, GRPC),
        ({"OTEL_LOGS_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_LOGS_PROTOCOL": "grpc"}, (), GRPC),
        ({"OTEL_TRACES_EXPORTER": "otlp,console"}, (*HTTP, "console"), ()),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "true"}, (), ()),
    ],
)
def test_export_is_off_unless_asked_for_and_otlp_is_http_unless_grpc_is_asked_for(
    environ: dict[str, str], traces: tuple[str, ...], logs: tuple[str, ...]
) -> None:
    config = parse_otel_environment(environ)
    assert (config.traces.exporters, config.logs.exporters) == (traces, logs)
    assert config.enabled == (not config.disabled and (traces, logs) != ((), ()))


def test_the_timeout_is_milliseconds_as_the_specification_says() -> None:
    """The Python OTLP exporters read OTEL_EXPORTER_OTLP_TIMEOUT as seconds (open-telemetry-python#4044):
    10000 would wait almost three hours. The pipeline hands them seconds."""
    config = parse_otel_environment(
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_LOGS_TIMEOUT": "2500"}
    )
    assert config.logs.timeout == 2.5 and config.traces.timeout is None
    generic = parse_otel_environment({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c", "OTEL_EXPORTER_OTLP_TIMEOUT": "10000"})
    assert generic.logs.timeout == generic.traces.timeout == 10.0


@pytest.mark.parametrize(
    "environ",
    [
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"},
        {"OTEL_LOGS_EXPORTER": "zipkin"},
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c", "OTEL_EXPORTER_OTLP_TIMEOUT": "soon"},
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c", "OTEL_EXPORTER_OTLP_COMPRESSION": "brotli"},
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c", "OTEL_EXPORTER_OTLP_HEADERS": "authorization"},
        {"OTEL_BSP_MAX_QUEUE_SIZE": "lots"},
        {"OTEL_BLRP_MAX_EXPORT_BATCH_SIZE": "0"},
    ],
)
def test_a_value_the_sdk_would_misread_silently_names_the_variable(environ: dict[str, str]) -> None:
    with pytest.raises(ConfigError, match=list(environ)[-1]):
        parse_otel_environment(environ)


@pytest.mark.parametrize(
    ("environ", "queue", "batch"),
    [
        ({}, 512, 128),  # ours: the SDK's 2,048 lifecycle spans of the largest events exceed the pod's 96 MiB
        ({"OTEL_BSP_MAX_QUEUE_SIZE": "100"}, None, 100),
        ({"OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "1000"}, 1000, None),
        ({"OTEL_BSP_MAX_QUEUE_SIZE": "4096", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "256"}, None, None),
    ],
)
def test_the_span_queue_and_batch_are_ours_only_where_the_user_set_none(
    environ: dict[str, str], queue: int | None, batch: int | None
) -> None:
    """None: the SDK reads the variable itself."""
    config = parse_otel_environment(environ)
    assert (config.span_queue, config.span_batch) == (queue, batch)


def test_a_span_batch_larger_than_the_queue_is_refused_at_start() -> None:
    with pytest.raises(
        ConfigError, match="OTEL_BSP_MAX_EXPORT_BATCH_SIZE=600 is larger than OTEL_BSP_MAX_QUEUE_SIZE=500"
    ):
        parse_otel_environment({"OTEL_BSP_MAX_QUEUE_SIZE": "500", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "600"})


def test_an_exporter_that_is_not_installed_is_named_with_those_that_are() -> None:
    with pytest.raises(ConfigError, match=r"OTEL_TRACES_EXPORTER='zipkin': no traces exporter named zipkin") as error:
        parse_otel_environment({"OTEL_TRACES_EXPORTER": "zipkin"})
    assert "console" in str(error.value) and "otlp_proto_grpc" in str(error.value)


def test_resource_from_compute_metadata() -> None:
    """What se-exporter knows; OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME are the SDK's to read, and win
    (tests/otel/test_export.py sees both on the wire)."""
    assert resource_attributes(COMPUTE, "1.2.3") == {
        "service.name": "se-exporter",
        "service.version": "1.2.3",
        "host.name": "vm-a",
        "host.id": "0000-1",
        "host.type": "Standard_D2s_v5",
        "cloud.provider": "azure",
        "cloud.platform": "azure.vm",
        "cloud.region": "westeurope",
        "cloud.account.id": "sub-1",
        "cloud.resource_id": "/subscriptions/sub-1/vm-a",
    }
    bare = resource_attributes(VMIdentity(name="vm-a"), "1.2.3")
    assert bare == {"service.name": "se-exporter", "service.version": "1.2.3", "host.name": "vm-a"}


def stderr_line(level: str, fmt: str) -> str:
    stream = io.StringIO()
    handler = logs.configure(level, fmt, stream)
    try:
        (failure,) = transitions_of(  # appeared Started while watching: the hardware-failure path
            Document(1),
            Document(2, (ScheduledEvent("HW", "Reboot", "Started", resources=("vm-a",), event_source="Platform"),)),
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
