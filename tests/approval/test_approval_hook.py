"""The hook: real tiny scripts, their environment, failures, timeouts and the output log."""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from se_exporter.approval.hook import HookRunner
from se_exporter.approval.policy import Hook
from se_exporter.process.command import MAX_LOGGED_LINES, event_environment
from tests.approval.helpers import VM, event, wait_until

pytestmark = pytest.mark.posix

DUMP_ENV = "import json, os, sys; json.dump(dict(os.environ), open(sys.argv[1], 'w'))"


def python_hook(code: str, *args: str, timeout: float = 10.0, inherit: tuple[str, ...] = ()) -> Hook:
    return Hook(command=(sys.executable, "-c", code, *args), timeout_seconds=timeout, inherit_env=inherit)


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"  # a zombie is dead, just not reaped yet


def test_success_receives_the_event_in_its_environment(tmp_path: Path) -> None:
    env_file = tmp_path / "env.json"
    environ = {
        "PATH": os.environ["PATH"],
        "HOME": "/home/x",
        "NODE_NAME": "aks-node-3",
        "OTEL_EXPORTER_OTLP_HEADERS": "authorization=secret",
        "SE_EVENT_ID": "spoofed",
    }
    runner = HookRunner(python_hook(DUMP_ENV, str(env_file), inherit=("NODE_NAME",)), environ=environ)
    try:
        the_event = event(
            "3B2C-1",
            event_type="Freeze",
            duration_seconds=5,
            resources=(VM, "vm-b", "vm-c"),
            not_before=datetime(2025, 6, 15, 15, 21, 40, tzinfo=UTC),
            description="Host update\0!",
        )
        result = runner.submit(the_event, VM, "short-freeze", seconds_left=300.5).result(timeout=10)
    finally:
        runner.close()
    assert result.ok and result.exit_code == 0 and not result.timed_out
    assert result.summary == "exited with status 0"
    env = json.loads(env_file.read_text(encoding="utf-8"))
    assert env.pop("SE_EVENT_SECONDS_LEFT") in ("299", "300")  # whole seconds left when the hook started
    event_file = env.pop("SE_EVENT_FILE")
    assert event_file and not Path(event_file).exists()  # removed when the hook ended
    assert {k: v for k, v in env.items() if k.startswith("SE_")} == {
        "SE_EVENT_ID": "3B2C-1",
        "SE_EVENT_TYPE": "Freeze",
        "SE_EVENT_STATUS": "Scheduled",
        "SE_EVENT_SOURCE": "User",
        "SE_EVENT_NOT_BEFORE": "2025-06-15T15:21:40Z",
        "SE_EVENT_DURATION_SECONDS": "5",
        "SE_EVENT_RESOURCES": '["vm-a", "vm-b", "vm-c"]',
        "SE_EVENT_RESOURCE_TYPE": "VirtualMachine",
        "SE_EVENT_DESCRIPTION": "Host update!",
        "SE_EVENT_IMPACT": "pause",
        "SE_EVENT_CAUSE": "user",
        "SE_VM_NAME": VM,
        "SE_APPROVAL_RULE": "short-freeze",
    }
    assert env["NODE_NAME"] == "aks-node-3" and env["HOME"] == "/home/x"
    assert "OTEL_EXPORTER_OTLP_HEADERS" not in env  # secrets are not inherited


def test_environment_without_not_before_or_path() -> None:
    env = event_environment(event(not_before=None, resources=()), {"SE_VM_NAME": VM}, base={})
    assert env["SE_EVENT_NOT_BEFORE"] == "" and env["SE_EVENT_RESOURCES"] == "[]"
    assert env["SE_EVENT_SECONDS_LEFT"] == ""  # no NotBefore, no deadline
    assert env["PATH"].startswith("/usr/local/sbin")


def test_failure_is_not_ok_and_its_output_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="se_exporter.approval")
    runner = HookRunner(
        python_hook("print('cordoning', flush=True); import sys; sys.stderr.write('no kubeconfig\\n'); exit(3)")
    )
    try:
        result = runner.submit(event("E9"), VM, "r").result(timeout=10)
    finally:
        runner.close()
    assert not result.ok
    assert (result.exit_code, result.summary, result.last_output) == (3, "exited with status 3", "no kubeconfig")
    messages = [r.getMessage() for r in caplog.records]
    assert "approval hook output: event_id=E9 cordoning" in messages
    assert "approval hook output: event_id=E9 no kubeconfig" in messages
    assert any(
        "exited with status 3: event_id=E9" in m and r.levelno == logging.WARNING
        for m, r in zip(messages, caplog.records, strict=True)
    )


def test_output_logging_is_bounded(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="se_exporter.approval")
    runner = HookRunner(python_hook(f"print('x' * 10000); [print(i) for i in range({MAX_LOGGED_LINES + 50})]"))
    try:
        assert runner.submit(event(), VM, "r").result(timeout=10).ok
    finally:
        runner.close()
    output = [r.getMessage() for r in caplog.records if "hook output" in r.getMessage()]
    assert len(output) == MAX_LOGGED_LINES + 1 and output[-1].endswith("further output not logged")
    assert max(len(m) for m in output) < 4200  # a long line is cut at 4096 bytes


def test_timeout_kills_the_whole_process_group_and_polling_is_not_blocked(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    code = (
        "import signal, subprocess, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"  # ignores SIGTERM: SIGKILL after the grace period
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "open(sys.argv[1], 'w').write(str(child.pid))\n"
        "print('draining', flush=True)\n"
        "time.sleep(60)\n"
    )
    runner = HookRunner(python_hook(code, str(pid_file), timeout=1.0), kill_grace_seconds=0.3)
    try:
        future = runner.submit(event(), VM, "r")
        assert not future.done()  # submit never waits for the hook: it runs for 60 s, until killed at 1 s
        wait_until(pid_file.exists, what="the hook's child to start")
        assert not future.done()
        result = future.result(timeout=10)
    finally:
        runner.close()
    assert result.timed_out and not result.ok and result.exit_code is None
    assert result.summary == "timed out after 1 s; its processes were stopped"
    assert result.last_output == "draining"
    # Its 1 s timeout, then a 0.3 s grace: the upper bound only tells that from the hook's own 60 s.
    assert 1.0 <= result.duration_seconds < 30
    child = int(pid_file.read_text(encoding="utf-8"))
    wait_until(lambda: not alive(child), what="the hook's child to be killed with its group")


def test_command_that_cannot_start(tmp_path: Path) -> None:
    script = tmp_path / "drain-me"
    script.write_text("#!/bin/sh\nexit 0\n")  # not executable
    runner = HookRunner(Hook(command=(str(script),)))
    try:
        result = runner.submit(event(), VM, "r").result(timeout=10)
    finally:
        runner.close()
    assert not result.ok and result.summary.startswith("could not start: [Errno 13] Permission denied")


def test_shell_script_hook(tmp_path: Path) -> None:
    script = tmp_path / "drain-me"
    out = tmp_path / "out"
    script.write_text(f'#!/bin/sh\necho "$SE_EVENT_ID $SE_EVENT_TYPE $SE_EVENT_RESOURCES" > {out}\n')
    script.chmod(0o755)
    runner = HookRunner(Hook(command=(str(script),)))
    try:
        assert runner.submit(event("E5"), VM, "r").result(timeout=10).ok
    finally:
        runner.close()
    assert out.read_text(encoding="utf-8") == 'E5 Reboot ["vm-a", "vm-b"]\n'


def test_close_kills_a_running_hook(tmp_path: Path) -> None:
    started = tmp_path / "started"
    runner = HookRunner(python_hook("import sys, time; open(sys.argv[1], 'w'); time.sleep(60)", str(started)))
    future = runner.submit(event(), VM, "r")
    wait_until(started.exists, what="the hook to start")
    runner.close()
    result = future.result(timeout=10)
    assert not result.ok and result.summary == "killed by signal 15"


def test_long_values_are_cut_and_the_whole_event_is_in_the_event_file(tmp_path: Path) -> None:
    """A 200 KiB Description once stopped the hook from starting at all (E2BIG); "vm-b,vm-c" read as two VMs."""
    out = tmp_path / "seen.json"
    code = (
        "import json, os, sys; json.dump({'env': dict(os.environ),"
        " 'file': json.load(open(os.environ['SE_EVENT_FILE']))}, open(sys.argv[1], 'w'))"
    )
    runner = HookRunner(python_hook(code, str(out)))
    long_text = "Host update. " + "x" * 200_000
    try:
        result = runner.submit(event("E7", resources=(VM, "vm-b,vm-c"), description=long_text), VM, "r").result(10)
    finally:
        runner.close()
    assert result.ok, result.summary
    seen = json.loads(out.read_text(encoding="utf-8"))
    description = seen["env"]["SE_EVENT_DESCRIPTION"]
    assert len(description) == 8192 and description.endswith("…[cut: the full event is in $SE_EVENT_FILE]")
    assert json.loads(seen["env"]["SE_EVENT_RESOURCES"]) == [VM, "vm-b,vm-c"]
    assert seen["file"]["Description"] == long_text and seen["file"]["Resources"] == [VM, "vm-b,vm-c"]
    assert (seen["file"]["EventId"], seen["file"]["Impact"], seen["file"]["Cause"]) == ("E7", "reboot", "user")


def test_a_hook_still_running_at_not_before_is_stopped_and_expired(tmp_path: Path) -> None:
    started = tmp_path / "started"
    runner = HookRunner(
        python_hook("import sys, time; open(sys.argv[1], 'w'); time.sleep(60)", str(started), timeout=300),
        kill_grace_seconds=0.3,
    )
    try:
        began = time.monotonic()
        result = runner.submit(event(), VM, "r", seconds_left=1.0).result(timeout=20)
    finally:
        runner.close()
    assert started.exists() and result.expired and result.timed_out and not result.ok
    assert time.monotonic() - began < 10  # NotBefore, not the 300 s timeout
    assert result.summary == "was still running at NotBefore (1.0 s after it started); its processes were stopped"


def test_no_hook_starts_once_not_before_has_passed(tmp_path: Path) -> None:
    started = tmp_path / "started"
    runner = HookRunner(python_hook("import sys; open(sys.argv[1], 'w')", str(started)))
    try:
        result = runner.submit(event(), VM, "r", seconds_left=-5).result(timeout=10)
    finally:
        runner.close()
    assert result.expired and not started.exists() and result.summary == "was not started: NotBefore had passed"


def test_what_a_hook_leaves_running_in_the_background_ends_with_it(tmp_path: Path) -> None:
    """A background process that keeps the hook's output open once cost a thread and a descriptor per run."""
    pid_file = tmp_path / "background.pid"
    script = tmp_path / "hook.sh"
    script.write_text(f"#!/bin/sh\nsleep 60 &\necho $! > {pid_file}\nexit 0\n")
    script.chmod(0o755)
    runner = HookRunner(Hook(command=(str(script),)), kill_grace_seconds=0.5)
    try:
        before = {thread.ident for thread in threading.enumerate()}
        result = runner.submit(event("A"), VM, "rule").result(timeout=10)
        background = int(pid_file.read_text(encoding="utf-8"))
        wait_until(lambda: not alive(background), what="the background process to be gone")
        wait_until(
            lambda: (
                not [t for t in threading.enumerate() if t.ident not in before and t.name == "se-approval-hook-output"]
            ),
            what="the output reader thread to end",
        )
    finally:
        runner.close()
    assert result.ok and result.summary == "exited with status 0"
