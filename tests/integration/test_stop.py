"""Stopping the real exporter process: every stop signal is a clean stop (state saved, exit 0), from the
first moment of start-up to a hook that ignores SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.exporter_process import ExporterProcess
from tests.support.fake_imds import COMPUTE, Answer, FakeIMDS, document, scheduled_event
from tests.support.state_file import saved_event_ids
from tests.support.wait import wait_for

pytestmark = [pytest.mark.posix, pytest.mark.full]

StartExporter = Callable[..., ExporterProcess]
REBOOT = scheduled_event("E1")


def stopped_within(exporter: ExporterProcess, sig: int, seconds: float) -> int:
    started = time.monotonic()
    code = exporter.stop(sig, timeout=seconds + 10)
    took = time.monotonic() - started
    assert took < seconds, f"the stop took {took:.1f} s:\n{exporter.logs()[-2000:]}"
    return code


@pytest.mark.parametrize("signal_name", ["SIGTERM", "SIGINT", "SIGHUP"])  # by name: Windows has no SIGHUP
def test_every_stop_signal_is_a_clean_stop_that_saves_the_state(
    signal_name: str, tmp_path: Path, fake_imds: FakeIMDS, start_exporter: StartExporter
) -> None:
    sig = getattr(signal, signal_name)
    state = tmp_path / "state.db"
    fake_imds.respond = lambda seen: document(1, REBOOT)
    exporter = start_exporter(
        f"--imds.url={fake_imds.url}", "--poll.interval=250ms", f"--state.file={state}", "--vm.name=vm-a"
    )
    exporter.wait_ready()
    assert stopped_within(exporter, sig, 5) == 0
    logs = exporter.logs()
    assert f"received {signal.Signals(sig).name}, shutting down" in logs
    assert saved_event_ids(state) == ["E1"]


def test_a_stop_while_start_up_waits_on_imds_is_clean_and_quick(
    fake_imds: FakeIMDS, start_exporter: StartExporter
) -> None:
    """With OpenTelemetry on, start-up first asks IMDS who this VM is (up to 2 minutes)."""
    fake_imds.compute = Answer(body=json.dumps(COMPUTE).encode(), delay=60)
    exporter = start_exporter(
        f"--imds.url={fake_imds.url}",
        env={"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9", "OTEL_TRACES_EXPORTER": "none"},
    )
    wait_for(
        lambda: any(s.path.startswith("/metadata/instance/compute") for s in fake_imds.requests),
        20,
        "the start-up request for compute metadata",
    )
    assert stopped_within(exporter, signal.SIGTERM, 5) == 0
    assert "stopped during start-up" in exporter.logs()


def test_a_hook_that_ignores_sigterm_is_killed_and_the_stop_takes_seconds(
    tmp_path: Path, fake_imds: FakeIMDS, start_exporter: StartExporter
) -> None:
    pid_file = tmp_path / "hook.pid"
    hook = tmp_path / "hook.sh"
    hook.write_text(f"#!/bin/sh\ntrap '' TERM\necho $$ > {pid_file}\nsleep 100 & wait\n")
    hook.chmod(0o755)
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        f"rules:\n  - name: user\n    event_sources: [User]\nhook:\n  command: [{hook}]\n  timeout_seconds: 300\n"
    )
    fake_imds.respond = lambda seen: document(1, REBOOT)
    exporter = start_exporter(
        f"--imds.url={fake_imds.url}", "--poll.interval=250ms", "--vm.name=vm-a", f"--approval.config={policy}"
    )
    hook_pid = int(
        wait_for(
            lambda: (pid_file.exists() and pid_file.read_text(encoding="utf-8").strip()) or None,
            20,
            "the hook to start",
        )
    )
    assert stopped_within(exporter, signal.SIGTERM, 12) == 0  # the hook's 5 s grace, not its 300 s timeout
    wait_for(lambda: not _alive(hook_pid), 5, "the hook to be gone")
    assert [s for s in fake_imds.requests if s.method == "POST"] == []


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/status")
    return not (status.exists() and "\nState:\tZ" in status.read_text(encoding="utf-8"))
