"""Exposition rendered by the snapshot collector: golden file, promtool, scrape-time values."""

from __future__ import annotations

import os
import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from se_exporter.errors import IMDSHTTPError, IMDSTimeout, InvalidDocument
from se_exporter.health import PollHealth
from se_exporter.imds.document import Document, ScheduledEvent, parse_document
from se_exporter.imds.identity import VMIdentity
from se_exporter.metrics.collector import ExporterMetrics, SnapshotCollector
from se_exporter.store import EventStore

TESTDATA = Path(__file__).parent / "testdata"
GOLDEN = TESTDATA / "golden" / "exposition.prom"
THIS_VM = VMIdentity(name="WestNO_0")
T0 = datetime(2022, 4, 11, 22, 20, 0, tzinfo=UTC).timestamp()  # 418 s before the Freeze's NotBefore


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def render(store: EventStore, metrics: ExporterMetrics, clock: Clock, health: PollHealth,
           identity: VMIdentity = THIS_VM) -> str:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(
        metrics=metrics, events=lambda: store.events, incarnation=lambda: store.incarnation,
        health=lambda: health, identity=lambda: identity, clock=clock, version="1.2.3",
    ))
    text = generate_latest(registry).decode()
    # the build info carries the running interpreter's version; pin it for the golden file
    return "\n".join(
        'azure_scheduled_events_exporter_build_info{python_version="3.x",version="1.2.3"} 1.0'
        if line.startswith("azure_scheduled_events_exporter_build_info{") else line
        for line in text.splitlines()
    ) + "\n"


def fixed_scenario() -> tuple[EventStore, ExporterMetrics, Clock]:
    """The docs' Freeze (scheduled, then started) plus a Started hardware-failure Reboot."""
    clock = Clock(T0)
    store, metrics = EventStore(), ExporterMetrics(approval_enabled=True)
    scheduled = parse_document((TESTDATA / "imds" / "docs-example-2-scheduled.json").read_bytes())
    reboot = ScheduledEvent(event_id="R1", event_type="Reboot", event_status="Started",
                            resources=("WestNO_1",), event_source="Platform", duration_seconds=-1)
    for t in store.reconcile(scheduled, clock.now):
        metrics.observe_transition(t)
    clock.now += 30
    for t in store.reconcile(Document(3, (*scheduled.events, reboot)), clock.now):
        metrics.observe_transition(t)
    metrics.observe_response("GET", "200", 0.004)
    metrics.observe_response("GET", "500", 0.02)
    metrics.observe_poll_error(IMDSHTTPError(500, "boom"))
    metrics.observe_poll_error(IMDSTimeout("slow"))
    metrics.observe_approval("Freeze", "dry_run")
    clock.now += 12.5  # the scrape happens later than the poll
    return store, metrics, clock


def test_golden_exposition() -> None:
    store, metrics, clock = fixed_scenario()
    text = render(store, metrics, clock, PollHealth(up=True, last_success=clock.now - 0.5))
    if os.environ.get("UPDATE_GOLDEN"):
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text(), "exposition changed; rerun with UPDATE_GOLDEN=1 and review the diff"


def test_scrape_time_values() -> None:
    store, metrics, clock = fixed_scenario()
    text = render(store, metrics, clock, PollHealth(up=True, last_success=clock.now))
    assert ('azure_scheduled_events_event_seconds_until_not_before{event_id="C7061BAC-AFDC-4513-B24B-AA5F13A16123",'
            'event_type="Freeze"} 375.5') in text
    assert 'azure_scheduled_events_event_started_seconds{event_id="R1",event_type="Reboot"} 12.5' in text
    assert ('azure_scheduled_events_event_info{affects_this_vm="false",event_id="R1",event_source="Platform",'
            'event_status="Started",event_type="Reboot",resource_type="VirtualMachine"} 1.0') in text
    clock.now += 100
    later = render(store, metrics, clock, PollHealth(up=True, last_success=clock.now))
    assert 'azure_scheduled_events_event_started_seconds{event_id="R1",event_type="Reboot"} 112.5' in later


def test_per_event_series_vanish_with_the_event() -> None:
    store, metrics, clock = fixed_scenario()
    for t in store.reconcile(Document(4, ()), clock.now):
        metrics.observe_transition(t)
    text = render(store, metrics, clock, PollHealth(up=True, last_success=clock.now))
    assert 'event_id="' not in text
    assert 'azure_scheduled_events_pending{event_status="Started",event_type="Reboot"} 0.0' in text
    assert 'azure_scheduled_events_transitions_total{event_type="Reboot",transition="completed"} 1.0' in text
    assert 'azure_scheduled_events_transitions_total{event_type="Freeze",transition="cancelled"} 1.0' in text


def test_before_the_first_poll() -> None:
    text = render(EventStore(), ExporterMetrics(), Clock(T0), PollHealth(), VMIdentity())
    assert "azure_scheduled_events_imds_up 0.0" in text
    assert "last_successful_poll_timestamp_seconds" not in text
    assert "document_incarnation" not in text
    assert "approvals_total" not in text  # approval is off: no zero series for it
    assert 'azure_scheduled_events_poll_errors_total{reason="invalid_document"} 0.0' in text


def test_unknown_vm_name_and_long_labels() -> None:
    store = EventStore()
    store.reconcile(Document(1, (ScheduledEvent(event_id="x" * 500, event_type="Brand\"New\nType",
                                                event_status="Scheduled", resources=("vm-a",)),)), T0)
    text = render(store, ExporterMetrics(), Clock(T0), PollHealth(up=True, last_success=T0), VMIdentity())
    assert 'affects_this_vm="unknown"' in text
    assert "x" * 500 not in text and "x" * 127 + "…" in text
    assert 'event_type="Brand\\"New\\nType"' in text
    assert 'azure_scheduled_events_pending{event_status="Scheduled",event_type="Brand\\"New\\nType"} 1.0' in text


def test_invalid_document_reason_is_counted() -> None:
    metrics = ExporterMetrics()
    metrics.observe_poll_error(InvalidDocument("nope"))
    metrics.observe_poll_error(IMDSHTTPError(429, "slow down"))
    metrics.observe_poll_error(IMDSHTTPError(400, "bad"))
    assert metrics.poll_errors.value(("invalid_document",)) == 1
    assert metrics.poll_errors.value(("throttled",)) == 1
    assert metrics.poll_errors.value(("http_4xx",)) == 1


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        if os.environ.get("CI"):
            pytest.fail("promtool is not installed (the README's test command installs Debian's prometheus)")
        pytest.skip("promtool is not installed")
    return path


def test_golden_exposition_passes_promtool_check_metrics() -> None:
    result = subprocess.run([promtool(), "check", "metrics"], input=GOLDEN.read_bytes(),
                            capture_output=True, timeout=60)
    assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()
