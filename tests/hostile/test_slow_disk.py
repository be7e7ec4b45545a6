"""A throttled disk (issue 38, point 2): every fsync takes 8 s, as on an Azure disk at its IOPS cap, through
an ``LD_PRELOAD`` shim compiled here with gcc (tests/support/slow_fsync.c). The view follows IMDS within two
polls whatever the disk does; what must be durable first waits on its own path; a SIGKILL in the middle of
a slow write loses nothing and sends nothing twice."""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path
from typing import Any

import pytest

from se_exporter.app import STOP_SECONDS
from tests.otlp import OTLPHttpReceiver
from tests.support.exporter_process import ExporterProcess
from tests.support.exposition import value
from tests.support.fake_imds import FakeIMDS, document, scheduled_event
from tests.support.preload import build_shim
from tests.support.wait import wait_for

pytestmark = [pytest.mark.posix, pytest.mark.debian]
StartExporter = Callable[..., ExporterProcess]
FSYNC_SECONDS = 8.0
INTERVAL = 0.5


@pytest.fixture(scope="module")
def shim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_shim("slow_fsync", tmp_path_factory.mktemp("shim"))


def due_in(event_id: str, seconds: float, **fields: Any) -> dict[str, Any]:
    not_before = format_datetime(datetime.now(UTC) + timedelta(seconds=seconds), usegmt=True)
    return scheduled_event(event_id, EventSource="Platform", NotBefore=not_before, **fields)


def on_metrics(exporter: ExporterProcess, event_id: str) -> bool:
    return 'event_id="' + event_id + '"' in exporter.metrics()


def transitions_once_b_arrived(receiver: OTLPHttpReceiver) -> list[tuple[str, str]]:
    """(EventId, transition) of every transition record the collector got, once event B's has arrived."""
    receiver.wait_for_logs(event_name="scheduled_event.transition", attributes={"scheduled_event.id": "B"}, timeout=30)
    logs = receiver.store.find_logs(event_name="scheduled_event.transition")
    return [(str(log["scheduled_event.id"]), str(log["scheduled_event.transition"])) for log in logs]


def test_with_8_s_fsyncs_a_new_event_is_shown_and_takes_the_vm_out_within_two_polls(
    shim: Path, tmp_path: Path, fake_imds: FakeIMDS, start_exporter: StartExporter, otlp_http_receiver: OTLPHttpReceiver
) -> None:
    slow = tmp_path / "fsync-seconds"
    first = due_in("A", 3600, EventType="Reboot")
    fake_imds.respond = lambda seen: document(1, first)
    exporter = start_exporter(
        f"--imds.url={fake_imds.url}",
        f"--poll.interval={INTERVAL * 1000:.0f}ms",
        "--vm.name=vm-a",
        f"--state.file={tmp_path / 'state.db'}",
        env={**otlp_http_receiver.env, "LD_PRELOAD": str(shim), "SLOW_FSYNC_FILE": str(slow)},
    )
    exporter.wait_ready()
    slow.write_text(f"{FSYNC_SECONDS}")  # from now on: the state file's and the spool's writes crawl
    second = due_in("B", 3600)
    fake_imds.respond = lambda seen: document(2, first, second)
    wait_for(lambda: on_metrics(exporter, "B"), 10, "B on /metrics")  # its writes are now in flight
    preempt = due_in("C", 30, EventType="Preempt")
    listed = time.monotonic()
    fake_imds.respond = lambda seen: document(3, first, second, preempt)
    wait_for(
        lambda: on_metrics(exporter, "C") and exporter.get("/-/traffic").status_code == 503,
        10,
        "the Preempt on /metrics and /-/traffic 503",
    )
    delay = time.monotonic() - listed
    print(f"\nwith {FSYNC_SECONDS:g} s fsyncs, a new event shown and /-/traffic 503 after {delay:.2f} s")
    assert delay < 2 * INTERVAL, f"{delay:.2f} s: the disk held up the view"
    assert exporter.get("/-/ready").status_code == 200
    slow.write_text("0")
    wait_for(
        lambda: (
            (value(exporter.metrics(), "azure_scheduled_events_state_write_seconds_sum", file="state") or 0)
            >= FSYNC_SECONDS
        ),
        60,
        "the slow state writes observed",
    )
    otlp_http_receiver.wait_for_logs(event_name="scheduled_event.transition", count=3, timeout=60)
    assert exporter.stop() == 0


def test_a_kill_in_the_middle_of_a_slow_write_emits_each_transition_once(
    shim: Path, tmp_path: Path, fake_imds: FakeIMDS, start_exporter: StartExporter, otlp_http_receiver: OTLPHttpReceiver
) -> None:
    slow = tmp_path / "fsync-seconds"
    state = f"--state.file={tmp_path / 'state.db'}"
    reboot = due_in("A", 3600, EventType="Reboot")
    fake_imds.respond = lambda seen: document(1)
    args = (f"--imds.url={fake_imds.url}", "--poll.interval=250ms", "--vm.name=vm-a", state)
    env = {**otlp_http_receiver.env, "LD_PRELOAD": str(shim), "SLOW_FSYNC_FILE": str(slow)}
    first = start_exporter(*args, env=env)
    first.wait_ready()
    slow.write_text(f"{FSYNC_SECONDS}")
    fake_imds.respond = lambda seen: document(2, reboot)
    wait_for(lambda: re.search(r"transition=scheduled", first.logs()), 10, "the transition emitted")
    first.proc.send_signal(signal.SIGKILL)  # its state and its spool are in the middle of their writes
    first.proc.wait(10)
    slow.unlink()
    second = start_exporter(*args, env=env)
    second.wait_ready()
    # Either the kill came before the poll's transaction reached the file (the second exporter emits the
    # transition again, same uid) or during its fsync (the kernel keeps what was written: the second finds
    # it committed, its record in the spool). Either way the collector gets it exactly once.
    otlp_http_receiver.wait_for_logs(event_name="scheduled_event.transition", timeout=30)
    assert len(re.findall(r"transition=scheduled", second.logs())) <= 1
    # A later event's record is sent after anything emitted before it (the spool is in order): once B's
    # arrived, a second record of A would have too.
    later = due_in("B", 3600, EventType="Reboot")
    fake_imds.respond = lambda seen: document(3, reboot, later)
    assert transitions_once_b_arrived(otlp_http_receiver) == [("A", "scheduled"), ("B", "scheduled")], "exactly once"
    assert second.stop() == 0


def test_a_stop_on_a_disk_that_takes_minutes_ends_within_its_bound_says_so_and_loses_nothing(
    shim: Path, tmp_path: Path, fake_imds: FakeIMDS, start_exporter: StartExporter, otlp_http_receiver: OTLPHttpReceiver
) -> None:
    """A stop waited for the disk, twice 30 s, past WinSW's 20 s stop timeout; now its waits share STOP_SECONDS
    (app.py), it ends with one error line, and the next start emits what the cut commit did not carry."""
    slow = tmp_path / "fsync-seconds"
    reboot = due_in("A", 3600, EventType="Reboot")
    fake_imds.respond = lambda seen: document(1, reboot)
    state = f"--state.file={tmp_path / 'state.db'}"
    args = (f"--imds.url={fake_imds.url}", "--poll.interval=250ms", "--vm.name=vm-a", state)
    env = {**otlp_http_receiver.env, "LD_PRELOAD": str(shim), "SLOW_FSYNC_FILE": str(slow)}
    first = start_exporter(*args, env=env)
    first.wait_ready()
    otlp_http_receiver.wait_for_logs(event_name="scheduled_event.transition", timeout=30)  # A's, on disk
    slow.write_text("600")  # from now on a commit takes ten minutes
    later = due_in("B", 3600, EventType="Reboot")
    fake_imds.respond = lambda seen: document(2, reboot, later)
    wait_for(lambda: on_metrics(first, "B"), 10, "B on /metrics: its commit hangs in fsync")
    # Far under the ten minutes the commit would take; the margin is for a loaded machine.
    assert first.stop(timeout=STOP_SECONDS + 30) == 0
    assert "stopping with changes not saved to state file" in first.logs()
    assert "a write was still in progress: a slow disk" in first.logs()
    slow.unlink()
    second = start_exporter(*args, env=env)
    second.wait_ready()
    assert transitions_once_b_arrived(otlp_http_receiver) == [("A", "scheduled"), ("B", "scheduled")], (
        "each once: B's record was spooled in the commit the stop cut short, and made again by the next start"
    )
    assert second.stop() == 0
