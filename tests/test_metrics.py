"""Exposition rendered by the snapshot collector: golden file, promtool, scrape-time values."""

from __future__ import annotations

import os
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest

from se_exporter.approval.ledger import ApprovalDecision, ApprovalResult
from se_exporter.errors import IMDSError, IMDSHTTPError, IMDSTimeout, InvalidDocument
from se_exporter.imds.document import Document, ScheduledEvent, VMIdentity, parse_document
from se_exporter.lifecycle import EventStore
from se_exporter.metrics.counters import Counters
from se_exporter.poller import POLL_ERROR_REASONS, PollResult, PollStatus
from tests.support import exposition
from tests.support.tools import require

pytestmark = pytest.mark.pure

TESTDATA = Path(__file__).parent / "testdata"
GOLDEN = TESTDATA / "golden" / "exposition.prom"
THIS_VM = VMIdentity(name="WestNO_0")
T0 = datetime(2022, 4, 11, 22, 20, 0, tzinfo=UTC).timestamp()  # 418 s before the Freeze's NotBefore


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def status(
    up: bool = False,
    last_success: float | None = None,
    identity: VMIdentity = THIS_VM,
    errors: tuple[IMDSError, ...] = (),
) -> PollStatus:
    counts = dict.fromkeys(POLL_ERROR_REASONS, 0)
    for error in errors:
        counts[error.reason] += 1
    return PollStatus(up=up, last_success=last_success, identity=identity, errors=counts)


def render(store: EventStore, counters: Counters, clock: Clock, poll_status: PollStatus) -> str:
    text = exposition.render(store, counters, poll_status, clock=clock, version="1.2.3")
    # the build info carries the running interpreter's version; pin it for the golden file
    return (
        "\n".join(
            'azure_scheduled_events_exporter_build_info{python_version="3.x",version="1.2.3"} 1.0'
            if line.startswith("azure_scheduled_events_exporter_build_info{")
            else line
            for line in text.splitlines()
        )
        + "\n"
    )


def reconcile(
    store: EventStore, counters: Counters, document: Document, now: float, decisions: tuple[ApprovalDecision, ...] = ()
) -> None:
    """One poll's facts, delivered to the counters as the poller delivers them."""
    transitions = store.reconcile(document, now)
    counters.on_poll(PollResult(document, transitions, decisions, True, THIS_VM, now))


ERRORS = (IMDSHTTPError(500, "boom"), IMDSTimeout("slow"))


def fixed_scenario() -> tuple[EventStore, Counters, Clock]:
    """The docs' Freeze (scheduled, then started) plus a Started hardware-failure Reboot and a Spot eviction-risk
    notice (Advisory)."""
    clock = Clock(T0)
    store, counters = EventStore(), Counters(approval_enabled=True)
    scheduled = parse_document((TESTDATA / "imds" / "docs-example-2-scheduled.json").read_bytes())
    reboot = ScheduledEvent(
        event_id="R1",
        event_type="Reboot",
        event_status="Started",
        resources=("WestNO_1",),
        event_source="Platform",
        duration_seconds=-1,
    )
    reconcile(store, counters, scheduled, clock.now)
    clock.now += 30
    dry_run = ApprovalDecision(scheduled.events[0], ApprovalResult.DRY_RUN, "short-freeze", "dry_run", None, clock.now)
    advisory = ScheduledEvent(
        event_id="S1",
        event_type="SpotRebalanceRecommendation",
        event_status="Advisory",
        resources=("WestNO_0",),
        event_source="Platform",
    )
    reconcile(store, counters, Document(3, (*scheduled.events, reboot, advisory)), clock.now, (dry_run,))
    counters.observe_response("GET", "200", 0.004)
    counters.observe_response("GET", "500", 0.02)
    clock.now += 12.5  # the scrape happens later than the poll
    return store, counters, clock


def test_golden_exposition() -> None:
    store, counters, clock = fixed_scenario()
    text = render(store, counters, clock, status(True, clock.now - 0.5, errors=ERRORS))
    if os.environ.get("UPDATE_GOLDEN"):
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text(encoding="utf-8"), (
        "exposition changed; rerun with UPDATE_GOLDEN=1 and review the diff"
    )


def test_scrape_time_values() -> None:
    store, counters, clock = fixed_scenario()
    text = render(store, counters, clock, status(True, clock.now))
    assert (
        'azure_scheduled_events_event_seconds_until_not_before{event_id="C7061BAC-AFDC-4513-B24B-AA5F13A16123",'
        'event_type="Freeze"} 375.5'
    ) in text
    assert 'azure_scheduled_events_event_started_seconds{event_id="R1",event_type="Reboot"} 12.5' in text
    assert (
        'azure_scheduled_events_event_info{affects_this_vm="false",cause="failure",event_id="R1",'
        'event_source="Platform",event_status="Started",event_type="Reboot",impact="reboot",'
        'resource_type="VirtualMachine"} 1.0'
    ) in text  # first seen Started: the hardware-failure path
    clock.now += 100
    later = render(store, counters, clock, status(True, clock.now))
    assert 'azure_scheduled_events_event_started_seconds{event_id="R1",event_type="Reboot"} 112.5' in later


def test_per_event_series_vanish_with_the_event() -> None:
    store, counters, clock = fixed_scenario()
    reconcile(store, counters, Document(4, ()), clock.now)
    text = render(store, counters, clock, status(True, clock.now))
    assert 'event_id="' not in text
    assert 'azure_scheduled_events_pending{event_status="Started",event_type="Reboot"} 0.0' in text
    assert 'azure_scheduled_events_transitions_total{event_type="Reboot",transition="completed"} 1.0' in text
    assert 'azure_scheduled_events_transitions_total{event_type="Freeze",transition="cancelled"} 1.0' in text


def test_before_the_first_poll() -> None:
    text = render(EventStore(), Counters(), Clock(T0), status(identity=VMIdentity()))
    assert "azure_scheduled_events_imds_up 0.0" in text
    assert "last_successful_poll_timestamp_seconds" not in text
    assert "document_incarnation" not in text
    assert "approvals_total" not in text  # approval is off: no zero series for it
    assert 'azure_scheduled_events_poll_errors_total{reason="invalid_document"} 0.0' in text


def test_unknown_vm_name_and_long_labels() -> None:
    store = EventStore()
    store.reconcile(
        Document(
            1,
            (
                ScheduledEvent(
                    event_id="x" * 500, event_type='Brand"New\nType', event_status="Scheduled", resources=("vm-a",)
                ),
            ),
        ),
        T0,
    )
    text = render(store, Counters(), Clock(T0), status(True, T0, VMIdentity()))
    assert 'affects_this_vm="unknown"' in text
    assert "x" * 500 not in text and "x" * 127 + "…" in text
    assert 'event_type="Brand\\"New\\nType"' in text
    assert 'azure_scheduled_events_pending{event_status="Scheduled",event_type="Brand\\"New\\nType"} 1.0' in text


def test_poll_errors_by_reason() -> None:
    errors = (InvalidDocument("nope"), IMDSHTTPError(429, "slow down"), IMDSHTTPError(400, "bad"), IMDSTimeout("x"))
    text = render(EventStore(), Counters(), Clock(T0), status(errors=errors))
    for reason, count in (("invalid_document", 1), ("throttled", 1), ("http_4xx", 1), ("timeout", 1), ("http_5xx", 0)):
        assert f'azure_scheduled_events_poll_errors_total{{reason="{reason}"}} {count}.0' in text


def promtool() -> str:
    return require("promtool")


@pytest.mark.debian
def test_golden_exposition_passes_promtool_check_metrics() -> None:
    result = subprocess.run(
        [promtool(), "check", "metrics"], input=GOLDEN.read_bytes(), capture_output=True, timeout=60
    )
    assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()


def test_invented_event_types_leave_a_bounded_number_of_series_behind() -> None:
    """10,000 distinct EventTypes once left 180,062 permanent series (18 per type) after the events were gone."""
    store, counters, clock = EventStore(), Counters(), Clock(1_700_000_000.0)
    invented = tuple(ScheduledEvent(f"E{i}", f"Kind{i}", "Scheduled") for i in range(1000))
    reconcile(store, counters, Document(1, invented), clock.now)
    reconcile(store, counters, Document(2), clock.now + 1)  # all gone (cancelled)
    text = render(store, counters, clock, status(True, clock.now))
    types = {labels["event_type"] for labels in exposition.series(text, "azure_scheduled_events_transitions_total")}
    assert types == {  # a series from its first count: none for the five known types, which never happened
        "Kind0",
        "Kind1",
        "Kind2",
        "Kind3",
        "Kind4",
        "other",
    }
    assert (
        exposition.value(text, "azure_scheduled_events_transitions_total", event_type="other", transition="scheduled")
        == 995
    )  # still counted, under "other"
    assert len(text.splitlines()) < 1000
