"""The exporter on the official Windows CPython 3.13, under Wine, against the simulator (issue 28, part 3).

Each exporter is ``wine python.exe -m se_exporter`` from this checkout (tests/shipped/wine.py); the
simulator and the test run on Linux, on the same loopback. What Wine cannot do (services.exe, CTRL+BREAK,
``taskkill /T``, ACLs) is named in docs/windows.md as not verified here.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from se_exporter.simulator import SELF, EventPlan, SimClock, SimulatedVM, SimulatorServer, SimWorld
from tests.shipped.wine import WindowsPython, windows_path, windows_python
from tests.support.exporter_process import bound_port
from tests.support.exposition import series, value
from tests.support.state_file import saved_rows
from tests.support.wait import wait_for

# One Wine server, one worker: the prefix is shared.
pytestmark = [pytest.mark.xdist_group("wine"), pytest.mark.debian, pytest.mark.posix, pytest.mark.shipped]
WINE_START_SECONDS = 90  # a cold Wine prefix; warm, the exporter is ready in a few seconds


@pytest.fixture(scope="module")
def windows() -> WindowsPython:
    return windows_python()


@pytest.fixture
def sim() -> Iterator[SimulatorServer]:
    """The simulator at speed 1: a Scheduled event stays Scheduled for the test, an approved one Starts."""
    world = SimWorld(vm=SimulatedVM(name="win-vm-0"), clock=SimClock(1.0), rng=random.Random(28))
    with SimulatorServer(world) as server:
        yield server


@pytest.fixture
def exporters() -> Iterator[list[WindowsExporter]]:
    started: list[WindowsExporter] = []
    yield started
    for exporter in started:
        exporter.close()


class WindowsExporter:
    """``se-exporter`` on Windows CPython: its output drained into memory, stopped by CTRL+C."""

    def __init__(
        self, python: WindowsPython, *args: str, env: dict[str, str] | None = None, port: int | None = None
    ) -> None:
        self._port = port  # None: port 0, the port it got read from its "listening on" line
        self.proc = python.popen("-m", "se_exporter", *args, f"--web.listen-address=127.0.0.1:{port or 0}", env=env)
        self._output = bytearray()
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()

    def _drain(self) -> None:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        for chunk in iter(lambda: os.read(fd, 65536), b""):
            self._output += chunk

    def output(self) -> str:
        return bytes(self._output).decode(errors="replace")

    @property
    def port(self) -> int:
        if self._port is None:
            self._port = wait_for(self._bound_port, WINE_START_SECONDS, "the 'listening on' line", retry_on=())
        return self._port

    def _bound_port(self) -> int | None:
        if self.proc.poll() is not None:
            self._reader.join(5)
            raise AssertionError(f"exited with {self.proc.returncode}:\n{self.output()[-3000:]}")
        return bound_port(self.output())

    def get(self, path: str) -> httpx.Response:
        return httpx.get(f"http://127.0.0.1:{self.port}{path}", timeout=10, trust_env=False)

    def wait_ready(self) -> None:
        def ready() -> bool:
            if self.proc.poll() is not None:
                self._reader.join(5)  # what it said before it exited, not an empty message
                raise AssertionError(f"exited with {self.proc.returncode}:\n{self.output()[-3000:]}")
            return self.get("/-/ready").status_code == 200

        wait_for(ready, WINE_START_SECONDS, "the Windows exporter ready", interval=0.2, retry_on=(httpx.HTTPError,))

    def interrupt(self) -> int:
        """CTRL+C, as WinSW stops a service (Wine delivers SIGINT to the process as CTRL+C)."""
        os.kill(self.proc.pid, signal.SIGINT)
        return self.wait(30)

    def wait(self, timeout: float) -> int:
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            raise AssertionError(f"still running after {timeout} s:\n{self.output()[-3000:]}") from None
        self._reader.join(10)
        return code

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def start(
    exporters: list[WindowsExporter], python: WindowsPython, *args: str, port: int | None = None, **env: str
) -> WindowsExporter:
    exporter = WindowsExporter(python, *args, env=env, port=port)
    exporters.append(exporter)
    return exporter


def test_on_windows_it_reports_the_events_and_one_exporter_holds_the_state_file(
    windows: WindowsPython, sim: SimulatorServer, exporters: list[WindowsExporter], tmp_path: Path
) -> None:
    event_id = sim.world.add_event(EventPlan("Reboot", "User", resources=(SELF,)))
    state = windows_path(tmp_path / "state.db")
    args = (f"--imds.url={sim.url}", "--poll.interval=250ms", f"--state.file={state}")
    first = start(exporters, windows, *args)
    first.wait_ready()
    listed = series(first.get("/metrics").text, "azure_scheduled_events_event_info")
    assert [(s["event_id"], s["affects_this_vm"], s["impact"]) for s in listed] == [(event_id, "true", "reboot")]

    second = start(exporters, windows, *args)
    assert second.wait(WINE_START_SECONDS) == 2
    assert f"--state.file: {state} is in use by another se-exporter (pid" in second.output()

    assert first.interrupt() == 0, first.output()[-3000:]
    assert event_id in json.dumps(saved_rows(tmp_path / "state.db")), "Windows' sqlite wrote it, Linux's reads it"


def test_as_a_service_ctrl_c_stops_it_cleanly_with_its_state_under_programdata(
    windows: WindowsPython, sim: SimulatorServer, exporters: list[WindowsExporter]
) -> None:
    """WINSW_SERVICE_ID set, no --state.file: the state goes to %ProgramData% (Wine's: C:\\ProgramData in
    its prefix; Wine sets PROGRAMDATA itself, whatever the environment says)."""
    event_id = sim.world.add_event(EventPlan("Freeze", "Platform", resources=(SELF,)))
    service_dir = windows.prefix / "drive_c" / "ProgramData" / "se-exporter"
    shutil.rmtree(service_dir, ignore_errors=True)
    service = start(exporters, windows, f"--imds.url={sim.url}", WINSW_SERVICE_ID="se-exporter")
    service.wait_ready()
    assert re.search(r"running as a service: state and log spool in C:\\+ProgramData\\+se-exporter", service.output())
    assert service.interrupt() == 0, service.output()[-3000:]
    assert "received SIGINT, shutting down" in service.output()
    assert event_id in json.dumps(saved_rows(service_dir / "state.db"))


def test_a_busy_port_is_the_same_one_line_as_on_linux(windows: WindowsPython, exporters: list[WindowsExporter]) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        exporter = start(exporters, windows, "--imds.url=http://127.0.0.1:9", port=port)
        assert exporter.wait(WINE_START_SECONDS) == 2
    lines = [line for line in exporter.output().splitlines() if "error" in line]
    assert lines == [
        f"se-exporter: error: --web.listen-address: cannot listen on 127.0.0.1:{port}: Address already in use"
    ]


def write_policy(tmp_path: Path, hook: list[str], timeout: float) -> Path:
    words = ", ".join(f"'{word}'" for word in hook)
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        "rules:\n  - name: user-initiated\n    event_sources: [User]\n"
        f"hook:\n  command: [{words}]\n  timeout_seconds: {timeout:g}\n",
        encoding="utf-8",
    )
    return policy


def start_approving(
    exporters: list[WindowsExporter], python: WindowsPython, sim: SimulatorServer, policy: Path
) -> WindowsExporter:
    """An exporter on the simulator with this approval policy, ready."""
    args = (f"--imds.url={sim.url}", "--poll.interval=250ms", f"--approval.config={windows_path(policy)}")
    exporter = start(exporters, python, *args)
    exporter.wait_ready()
    return exporter


def test_an_approval_through_a_cmd_hook_that_sees_the_event(
    windows: WindowsPython, sim: SimulatorServer, exporters: list[WindowsExporter], tmp_path: Path
) -> None:
    event_id = sim.world.add_event(EventPlan("Reboot", "User", resources=(SELF, "win-vm-1")))
    seen = tmp_path / "hook-env.txt"
    script = tmp_path / "drain.cmd"
    script.write_text(f'@echo off\r\nset SE_EVENT_>"{windows_path(seen)}"\r\necho drained\r\nexit /b 0\r\n')
    policy = write_policy(tmp_path, ["cmd.exe", "/c", windows_path(script)], timeout=60)
    exporter = start_approving(exporters, windows, sim, policy)
    wait_for(sim.world.truth.approvals, 60, "the approval POSTed to IMDS")
    assert [list(approval.outcomes) for approval in sim.world.truth.approvals()] == [[event_id]]
    variables = dict(line.split("=", 1) for line in seen.read_text(encoding="utf-8", errors="replace").splitlines())
    assert variables["SE_EVENT_ID"] == event_id
    assert variables["SE_EVENT_TYPE"] == "Reboot"
    assert (variables["SE_EVENT_IMPACT"], variables["SE_EVENT_CAUSE"]) == ("reboot", "user")
    assert json.loads(variables["SE_EVENT_RESOURCES"]) == ["win-vm-0", "win-vm-1"]
    assert int(variables["SE_EVENT_SECONDS_LEFT"]) > 0

    def approved() -> float | None:
        text = exporter.get("/metrics").text
        return value(text, "azure_scheduled_events_approvals_total", event_type="Reboot", result="approved")

    wait_for(approved, 20, "approvals_total counts it (once IMDS answered the POST)")
    assert approved() == 1
    assert exporter.interrupt() == 0


def test_a_hook_whose_child_outlives_the_timeout_is_stopped_on_time_and_blocks_nothing(
    windows: WindowsPython, sim: SimulatorServer, exporters: list[WindowsExporter], tmp_path: Path
) -> None:
    """The hook starts a child that keeps writing a heartbeat, then waits: the Job Object must end both."""
    sim.world.add_event(EventPlan("Reboot", "User", resources=(SELF,)))
    heartbeat = tmp_path / "heartbeat"
    child = f"import time\nwhile True:\n    open(r'{windows_path(heartbeat)}', 'a').write('.')\n    time.sleep(0.1)\n"
    (tmp_path / "child.py").write_text(child, encoding="utf-8")
    parent = (
        "import subprocess, sys, time\n"
        f"subprocess.Popen([sys.executable, r'{windows_path(tmp_path / 'child.py')}'])\n"
        "time.sleep(600)\n"
    )
    (tmp_path / "hook.py").write_text(parent, encoding="utf-8")
    python = windows_path(windows.exe)
    policy = write_policy(tmp_path, [python, windows_path(tmp_path / "hook.py")], timeout=2)
    exporter = start_approving(exporters, windows, sim, policy)
    wait_for(heartbeat.exists, 60, "the hook's child running")
    began = time.monotonic()
    polls_before = len(sim.world.truth.requests())

    def hook_failed() -> bool:
        text = exporter.get("/metrics").text  # answers while the hook runs, or this wait fails
        return value(text, "azure_scheduled_events_approvals_total", event_type="Reboot", result="hook_failed") == 1

    wait_for(hook_failed, 30, "the hook reported failed", interval=0.1, retry_on=())
    took = time.monotonic() - began
    assert took < 2 + 5 + 5, f"a 2 s timeout and a 5 s grace were reported after {took:.1f} s"
    assert len(sim.world.truth.requests()) - polls_before >= 4, "polling went on while the hook ran"
    assert "hook timed out after 2 s; its processes were stopped" in exporter.output(), exporter.output()[-3000:]
    size = heartbeat.stat().st_size
    time.sleep(1.0)  # an absence has no condition to wait on: ten heartbeats' time, in which a live child writes
    assert heartbeat.stat().st_size == size, "the hook's child still runs"
    assert sim.world.truth.approvals() == (), "nothing approved after a failed hook"
    began = time.monotonic()
    assert exporter.interrupt() == 0
    assert time.monotonic() - began < 15, "the stop waited on the hook"


def test_check_refuses_a_python_installed_for_one_user(windows: WindowsPython) -> None:
    """docs/windows.md runs `se-exporter check` after the install: a per-user Python (python.org's default)
    would make the LocalService service fail to start with nothing in our log. The same interpreter, seen
    from a profile's AppData (as python.org installs it for one user), is refused; from elsewhere, ok."""
    users = windows.prefix / "drive_c" / "users"
    user = next(p.name for p in users.iterdir() if p.name != "Public")
    per_user = users / user / "AppData" / "Local" / "Programs" / "Python" / "Python313"
    per_user.parent.mkdir(parents=True, exist_ok=True)
    per_user.unlink(missing_ok=True)
    per_user.symlink_to(windows.home, target_is_directory=True)
    try:
        exe = rf"C:\users\{user}\AppData\Local\Programs\Python\Python313\python.exe"
        refused = subprocess.run(
            [windows.wine, exe, "-m", "se_exporter", "check"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            env=windows.env(),
            timeout=120,
            check=False,
        )
    finally:
        per_user.unlink()
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert refused.stderr.strip() == (
        rf"se-exporter: error: Python at C:\users\{user}\AppData\Local\Programs\Python\Python313 is installed for "
        r"one user: the service's account (NT AUTHORITY\LocalService) cannot read it, so the service would not "
        "start. Install Python for all users (python.org installer: Customize installation, 'Install Python for "
        "all users'; or winget install Python.Python.3.12 --scope machine) and create the virtual environment "
        "again from it"
    )
    assert windows.run("-m", "se_exporter", "check") == (0, "ok\r\n")  # Windows line ends
