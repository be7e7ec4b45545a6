"""What the exporter could not see (issue 38, point 1): a maintenance that ran while it could not look (the
process paused as a Freeze pauses the VM, or stopped and started again) is `completed` with
`scheduled_event.started_observed=false`, never `cancelled`; a real cancellation while it watches is still
`cancelled`, and says whether the exporter watched until the NotBefore. Against a loopback IMDS."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime, parsedate_to_datetime
from pathlib import Path
from typing import Any

import pytest

from tests.support.exporter_process import ExporterProcess
from tests.support.exposition import value
from tests.support.fake_imds import FakeIMDS, document, scheduled_event
from tests.support.wait import wait_for

pytestmark = [pytest.mark.posix, pytest.mark.full]

StartExporter = Callable[..., ExporterProcess]
TRANSITIONS = "azure_scheduled_events_transitions_total"
PAUSE_SECONDS = 12.0  # beyond the 10 s a view may miss before it is a gap (at a 250 ms interval)


def reboot_due_in(seconds: float) -> dict[str, Any]:
    """Built once per test: an event made at every poll would move its NotBefore, a reschedule each second."""
    not_before = datetime.now(UTC) + timedelta(seconds=seconds)
    return scheduled_event("E1", EventSource="Platform", NotBefore=format_datetime(not_before, usegmt=True))


def not_before_passed(event: dict[str, Any]) -> bool:
    return datetime.now(UTC) > parsedate_to_datetime(event["NotBefore"])


def records(exporter: ExporterProcess) -> list[dict[str, Any]]:
    """The exporter's JSON transition lines."""
    return [
        json.loads(line)
        for line in exporter.logs().split("\n")
        if line.startswith("{") and '"event": "scheduled_event.transition"' in line
    ]


def kinds(*exporters: ExporterProcess) -> list[str]:
    return [record["scheduled_event.transition"] for exporter in exporters for record in records(exporter)]


def start(start_exporter: StartExporter, fake: FakeIMDS, *flags: str) -> ExporterProcess:
    return start_exporter(
        f"--imds.url={fake.url}", "--poll.interval=250ms", "--vm.name=vm-a", "--log.format=json", *flags
    )


@pytest.mark.skipif(sys.platform == "win32", reason="SIGSTOP: a POSIX signal")
def test_a_maintenance_that_ran_while_the_process_was_paused_is_completed_not_cancelled(
    fake_imds: FakeIMDS, start_exporter: StartExporter
) -> None:
    """The issue's case: paused across the NotBefore while IMDS started the Reboot and removed it."""
    event = reboot_due_in(4)
    fake_imds.respond = lambda seen: document(1, event)
    exporter = start(start_exporter, fake_imds)
    wait_for(lambda: kinds(exporter) == ["scheduled"], 20, "scheduled logged")
    os.kill(exporter.proc.pid, signal.SIGSTOP)
    try:
        time.sleep(PAUSE_SECONDS)  # the pause itself is what is tested: IMDS moves on meanwhile
        fake_imds.respond = lambda seen: document(3)  # Started and removed while nobody looked
    finally:
        os.kill(exporter.proc.pid, signal.SIGCONT)
    wait_for(lambda: len(kinds(exporter)) == 2, 20, "the removal logged")
    completed = records(exporter)[1]
    assert completed["scheduled_event.transition"] == "completed"
    assert completed["scheduled_event.started_observed"] is False
    assert "scheduled_event.started_s" not in completed, "no time in Started is made up"
    text = exporter.metrics()
    assert value(text, TRANSITIONS, event_type="Reboot", transition="completed") == 1
    assert value(text, TRANSITIONS, event_type="Reboot", transition="cancelled") is None
    assert value(text, TRANSITIONS, event_type="Reboot", transition="started") is None, "no start is invented"
    assert value(text, "azure_scheduled_events_started_duration_seconds_count", event_type="Reboot") is None
    assert exporter.stop() == 0


def test_a_maintenance_that_ran_across_a_restart_is_completed_not_cancelled(
    tmp_path: Path, fake_imds: FakeIMDS, start_exporter: StartExporter
) -> None:
    """The process stopped (the node rebooted, often because of the event) and the state file remembers."""
    state = f"--state.file={tmp_path / 'state.db'}"
    event = reboot_due_in(3)
    fake_imds.respond = lambda seen: document(1, event)
    first = start(start_exporter, fake_imds, state)
    wait_for(lambda: kinds(first) == ["scheduled"], 20, "scheduled logged")
    assert first.stop() == 0
    wait_for(lambda: not_before_passed(event), 10, "the NotBefore to pass while no exporter runs")
    fake_imds.respond = lambda seen: document(3)
    second = start(start_exporter, fake_imds, state)
    wait_for(lambda: kinds(second) == ["completed"], 20, "completed logged after the restart")
    assert records(second)[0]["scheduled_event.started_observed"] is False
    assert second.stop() == 0


def test_without_a_state_file_a_restart_says_nothing_of_what_it_never_knew(
    fake_imds: FakeIMDS, start_exporter: StartExporter
) -> None:
    event = reboot_due_in(3)
    fake_imds.respond = lambda seen: document(1, event)
    first = start(start_exporter, fake_imds)
    wait_for(lambda: kinds(first) == ["scheduled"], 20, "scheduled logged")
    assert first.stop() == 0
    wait_for(lambda: not_before_passed(event), 10, "the NotBefore to pass while no exporter runs")
    fake_imds.respond = lambda seen: document(3)
    second = start(start_exporter, fake_imds)
    second.wait_ready()
    wait_for(lambda: (value(second.metrics(), "azure_scheduled_events_imds_up") or 0) == 1, 20, "polling")
    assert kinds(second) == [], "nothing cancelled: the second process never saw the event"
    assert second.stop() == 0


def test_a_cancellation_before_the_not_before_while_watching_is_cancelled(
    fake_imds: FakeIMDS, start_exporter: StartExporter
) -> None:
    event = reboot_due_in(600)
    fake_imds.respond = lambda seen: document(1, event)
    exporter = start(start_exporter, fake_imds)
    wait_for(lambda: kinds(exporter) == ["scheduled"], 20, "scheduled logged")
    fake_imds.respond = lambda seen: document(2)
    wait_for(lambda: kinds(exporter) == ["scheduled", "cancelled"], 20, "cancelled logged")
    cancelled = records(exporter)[1]
    assert cancelled["scheduled_event.observed_until_not_before"] is False
    assert "scheduled_event.started_observed" not in cancelled
    assert exporter.stop() == 0
