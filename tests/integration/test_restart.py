"""Restarts with --state.file: no transition twice, time in Started continues; SIGTERM exits 0."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.exporter_process import ExporterProcess
from tests.support.exposition import value
from tests.support.fake_imds import FakeIMDS, document, scheduled_event
from tests.support.state_file import saved_rows
from tests.support.wait import wait_for

pytestmark = [pytest.mark.posix, pytest.mark.full]

StartExporter = Callable[..., ExporterProcess]
EVENT = scheduled_event("E1", EventSource="Platform")
STARTED = dict(EVENT, EventStatus="Started", NotBefore="")


def transitions(*exporters: ExporterProcess) -> list[str]:
    return [kind for e in exporters for kind in e.transitions()]


def started_seconds(exporter: ExporterProcess) -> float | None:
    return value(exporter.metrics(), "azure_scheduled_events_event_started_seconds", event_id="E1", event_type="Reboot")


@pytest.mark.parametrize("signal_name", ["SIGTERM", "SIGKILL"])  # by name: Windows has no SIGKILL
def test_restart_emits_no_transition_twice(
    signal_name: str, tmp_path: Path, fake_imds: FakeIMDS, start_exporter: StartExporter
) -> None:
    stop_signal = getattr(signal, signal_name)
    state = tmp_path / "state" / "state.db"
    args = (f"--imds.url={fake_imds.url}", "--poll.interval=250ms", f"--state.file={state}")
    fake_imds.respond = lambda seen: document(1, EVENT)
    first = start_exporter(*args)
    wait_for(lambda: transitions(first) == ["scheduled"], 20, "scheduled logged")
    fake_imds.respond = lambda seen: document(2, STARTED)
    wait_for(lambda: transitions(first) == ["scheduled", "started"], 20, "started logged")
    started_at = time.time()
    wait_for(lambda: saved_rows(state)["events"]["E1"]["started_at"], 10, "state saved")
    # No OTLP configured: no lifecycle span is ever sent, so none is kept (in memory or in the file).
    assert set(saved_rows(state)) == {"events", "event_store"}
    code = first.stop(stop_signal)
    assert code == (0 if stop_signal == signal.SIGTERM else -signal.SIGKILL)
    assert state.stat().st_mode & 0o077 == 0, "the state file must not be readable by others"

    second = start_exporter(*args)
    second.wait_ready()
    seconds = started_seconds(second)
    assert seconds is not None and seconds >= time.time() - started_at - 0.5, "time in Started restarted"
    fake_imds.respond = lambda seen: document(3)
    wait_for(lambda: "completed" in transitions(second), 20, "completed logged")
    assert transitions(first, second) == ["scheduled", "started", "completed"]
    text = second.metrics()
    # The second process counted no start (a transitions series exists from its first count).
    assert value(text, "azure_scheduled_events_transitions_total", event_type="Reboot", transition="started") is None
    assert value(text, "azure_scheduled_events_transitions_total", event_type="Reboot", transition="completed") == 1
    assert value(text, "azure_scheduled_events_started_duration_seconds_count", event_type="Reboot") == 1
    assert second.stop() == 0


def test_removal_while_down_is_seen_at_start(
    tmp_path: Path, fake_imds: FakeIMDS, start_exporter: StartExporter
) -> None:
    state = tmp_path / "state.db"
    args = (f"--imds.url={fake_imds.url}", "--poll.interval=250ms", f"--state.file={state}")
    fake_imds.respond = lambda seen: document(1, EVENT)
    first = start_exporter(*args)
    wait_for(lambda: transitions(first) == ["scheduled"], 20, "scheduled logged")
    assert first.stop() == 0
    fake_imds.respond = lambda seen: document(2)
    second = start_exporter(*args)
    wait_for(lambda: transitions(second) == ["cancelled"], 20, "cancelled logged after restart")


@pytest.mark.parametrize(
    "content",
    [
        b"{not json",
        b'{"version": 99}',
        b"\x00\xff",
        b"SQLite format 3\x00" + b"\x00" * 4000,  # a database's header, the rest of it gone
    ],
)
def test_corrupt_state_file_is_logged_and_ignored(
    content: bytes, tmp_path: Path, fake_imds: FakeIMDS, start_exporter: StartExporter
) -> None:
    state = tmp_path / "state.db"
    state.write_bytes(content)
    fake_imds.respond = lambda seen: document(1, EVENT)
    exporter = start_exporter(f"--imds.url={fake_imds.url}", "--poll.interval=250ms", f"--state.file={state}")
    wait_for(lambda: transitions(exporter) == ["scheduled"], 20, "scheduled logged despite the bad file")
    assert "cannot be used" in exporter.logs() and "starting without it" in exporter.logs()
    assert value(exporter.metrics(), "azure_scheduled_events_persistence_errors_total", file="state") == 1
    assert (tmp_path / "state.db.discarded").read_bytes() == content, "kept for a person to look at"
    wait_for(lambda: "event_store" in saved_rows(state), 10, "a new state file written")


def test_a_damaged_section_is_logged_and_its_component_starts_empty(
    tmp_path: Path, fake_imds: FakeIMDS, start_exporter: StartExporter
) -> None:
    state = tmp_path / "state.db"
    state.write_bytes(b'{"version": 1, "sections": {"store": {"events": 7}}}')  # imported, then refused
    fake_imds.respond = lambda seen: document(1, EVENT)
    exporter = start_exporter(f"--imds.url={fake_imds.url}", "--poll.interval=250ms", f"--state.file={state}")
    wait_for(lambda: transitions(exporter) == ["scheduled"], 20, "scheduled logged despite the bad section")
    assert "its store section cannot be used" in exporter.logs() and "starting without it" in exporter.logs()
    assert "rows cannot be used" not in exporter.logs(), "said once: the section, not its rows too"
    assert value(exporter.metrics(), "azure_scheduled_events_persistence_errors_total", file="state") == 1


def test_sigterm_exits_zero_promptly(fake_imds: FakeIMDS, start_exporter: StartExporter) -> None:
    exporter = start_exporter(f"--imds.url={fake_imds.url}", "--poll.interval=2m")
    exporter.wait_ready()
    began = time.monotonic()
    assert exporter.stop(signal.SIGTERM) == 0
    assert time.monotonic() - began < 30, "shutdown must not wait out the 2-minute poll interval"
    assert "shutting down" in exporter.logs()
