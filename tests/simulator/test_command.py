"""``se-exporter simulate`` as a subprocess: starts on an ephemeral port, answers, stops on SIGTERM."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.simulator.conftest import API, EVENTS_PATH, eventually

pytestmark = pytest.mark.posix

ROOT = Path(__file__).resolve().parents[2]


def simulate(*args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "se_exporter.simulator.command", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.fixture
def running() -> Iterator[tuple[subprocess.Popen[str], str]]:
    proc = simulate(
        "--web.listen-address",
        "127.0.0.1:0",
        "--scenario",
        "hardware-failure",
        "--scenario",
        "spot-preempt",
        "--speed",
        "10",
        "--vm.name",
        "vm-cli",
        "--seed",
        "1",
        "--fault.status",
        "503:2",
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # blocks until the server is bound (or the process died)
        assert line.startswith("listening on http://127.0.0.1:"), line + (proc.stderr.read() if proc.stderr else "")
        yield proc, line.split()[-1]
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)


def test_cli_serves_scenarios_and_faults(running: tuple[subprocess.Popen[str], str]) -> None:
    proc, url = running
    with httpx.Client(base_url=url, headers={"Metadata": "true"}, trust_env=False, timeout=5) as client:
        assert [client.get(EVENTS_PATH, params=API).status_code for _ in range(2)] == [503, 503]
        events = client.get(EVENTS_PATH, params=API).json()["Events"]
        assert [(e["EventType"], e["EventStatus"], e["Resources"]) for e in events] == [
            ("Reboot", "Started", ["vm-cli"])
        ]
        compute = client.get("/metadata/instance/compute", params={"api-version": "2021-02-01"}).json()
        assert compute["name"] == "vm-cli"
        state = client.get("/_sim/state").json()
        assert state["speed"] == 10.0
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(10) == 0
    assert proc.stderr is not None
    assert "change=appeared" in proc.stderr.read()


def test_cli_stops_on_sigint(running: tuple[subprocess.Popen[str], str]) -> None:
    proc, url = running
    eventually(lambda: httpx.get(url + "/_sim/state", trust_env=False).status_code == 200, what="simulator up")
    proc.send_signal(signal.SIGINT)
    assert proc.wait(10) == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--speed", "0"], "argument --speed: invalid speed '0'"),
        (["--speed", "fast"], "argument --speed: invalid speed 'fast'"),
        (["--web.listen-address", "nowhere"], "invalid listen address 'nowhere'"),
        (["--loop.gap", "soon"], "invalid duration 'soon'"),
        (["--fault.status", "503:many"], "invalid --fault.status '503:many'"),
        (["--fault.malformed", "weird"], "invalid --fault.malformed 'weird'"),
        (["--fault.status", "200"], "fault rule status: must be an HTTP error code"),
        (["--scenario", "no-such-scenario"], "scenario 'no-such-scenario': neither a built-in"),
    ],
)
def test_cli_bad_values(args: list[str], message: str) -> None:
    proc = simulate("--web.listen-address", "127.0.0.1:0", *args)
    _, stderr = proc.communicate(timeout=20)
    assert proc.returncode == 2
    assert message in stderr
    assert stderr.strip().splitlines()[-1].startswith("se-exporter: error:")


def test_cli_bad_scenario_file_names_the_key(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("events:\n  - {id: e, type: Reboot, notice: later}\n")
    proc = simulate("--web.listen-address", "127.0.0.1:0", "--scenario", str(path))
    _, stderr = proc.communicate(timeout=20)
    assert proc.returncode == 2
    assert f'{path}: events[0].notice: must be a number >= 0, got "later"' in stderr


def test_cli_port_in_use() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        proc = simulate("--web.listen-address", f"127.0.0.1:{taken.getsockname()[1]}")
        _, stderr = proc.communicate(timeout=20)
    assert proc.returncode == 2  # bad input, like every other command
    assert "cannot listen on 127.0.0.1:" in stderr


def test_cli_lists_scenarios() -> None:
    proc = simulate("--list-scenarios")
    stdout, _ = proc.communicate(timeout=20)
    assert proc.returncode == 0
    assert "freeze-live-migration:" in stdout and "reschedule:" in stdout
