"""The platform seam: the choices it makes for Windows (tested here, on Linux), the POSIX calls it makes
for real, and the rule that no other module calls anything POSIX-only."""

from __future__ import annotations

import ast
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from se_exporter.imds.document import ScheduledEvent
from se_exporter.platform import (
    CREATE_NEW_PROCESS_GROUP,
    CTRL_BREAK_EVENT,
    SIGBREAK,
    SIGINT,
    PosixPlatform,
    WindowsPlatform,
    current,
)
from se_exporter.platform.windows import JobObject
from se_exporter.process.command import event_environment
from tests.support.wait import wait_for

PACKAGE = Path(__file__).resolve().parents[1] / "se_exporter"
POSIX_ONLY = {
    ("os", "killpg"),
    ("os", "setsid"),
    ("os", "O_DIRECTORY"),
    ("os", "fork"),
    ("signal", "SIGKILL"),
    ("signal", "SIGTERM"),
    ("signal", "SIGHUP"),
}
POSIX_MODULES = {"fcntl", "termios", "pwd", "grp", "resource"}


class FakeProcess:
    """A started process as far as the seam is concerned: a pid, the signals sent to it, whether it runs."""

    def __init__(self, pid: int = 4242) -> None:
        self.pid = pid
        self.signals: list[int] = []
        self.killed = False

    def send_signal(self, sig: int) -> None:
        self.signals.append(sig)

    def kill(self) -> None:
        self.killed = True

    def poll(self) -> int | None:
        return 1 if self.killed else None


class FakeJob(JobObject):
    """A Job Object that answers as told: whether terminate works, how many processes it still holds."""

    def __init__(self, terminates: bool, active: int | None) -> None:
        super().__init__(handle=None)
        self.terminates, self.count, self.terminated, self.closed = terminates, active, False, False

    def terminate(self) -> bool:
        self.terminated = True
        return self.terminates

    def active(self) -> int | None:
        return self.count

    def close(self) -> None:
        self.closed = True


def test_windows_starts_a_hook_in_its_own_process_group() -> None:
    assert WindowsPlatform().hook_popen_options() == {"creationflags": CREATE_NEW_PROCESS_GROUP}
    assert CREATE_NEW_PROCESS_GROUP == 0x200  # the Win32 value subprocess.CREATE_NEW_PROCESS_GROUP has there


def test_windows_asks_the_group_to_stop_with_ctrl_break_and_kills_the_job() -> None:
    ran: list[list[str]] = []
    job = FakeJob(terminates=True, active=0)
    platform = WindowsPlatform(run=lambda command: ran.append(list(command)), contain=lambda pid: job)
    process = FakeProcess(4242)
    tree = platform.track(process)
    tree.ask_to_stop()
    assert process.signals == [CTRL_BREAK_EVENT] and not job.terminated
    tree.kill()
    assert job.terminated and ran == [] and process.killed
    assert tree.remaining() is False
    tree.close()
    assert job.closed


@pytest.mark.parametrize(
    ("job", "remaining"),
    [
        (None, None),  # no Job Object could be made: the command is killed, its children cannot be counted
        (FakeJob(terminates=False, active=2), True),  # the job refused: taskkill, and two are left
    ],
    ids=["no-job", "job-refuses"],
)
def test_windows_falls_back_to_taskkill_then_the_command_and_says_what_is_left(
    job: FakeJob | None, remaining: bool | None
) -> None:
    ran: list[list[str]] = []
    platform = WindowsPlatform(run=lambda command: ran.append(list(command)), contain=lambda pid: job)
    process = FakeProcess(4242)
    tree = platform.track(process)
    assert tree.remaining() is True  # the command itself runs
    tree.kill()
    assert ran == [["taskkill", "/T", "/F", "/PID", "4242"]] and process.killed
    assert tree.remaining() is remaining


@pytest.mark.full
def test_windows_taskkill_that_hangs_or_is_missing_is_reported_not_raised() -> None:
    from se_exporter.platform.windows import _run_quietly

    missing = _run_quietly(["se-exporter-no-such-program"])
    assert isinstance(missing, OSError)
    slow = _run_quietly([sys.executable, "-c", "import time; time.sleep(60)"])  # the 10 s bound
    assert isinstance(slow, subprocess.TimeoutExpired)


def test_windows_stop_requests_are_ctrl_c_and_ctrl_break() -> None:
    assert WindowsPlatform().stop_signals == (SIGINT, SIGBREAK) == (2, 21)  # what WinSW's stop sends: CTRL+C


def test_windows_does_not_fsync_a_directory(tmp_path: Path) -> None:
    """NTFS makes a rename durable by itself; Windows cannot open a directory to fsync it: nothing is tried."""
    assert WindowsPlatform().sync_directory(tmp_path) is False


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, None),  # started by hand: no default, as on Linux
        (
            {"WINSW_SERVICE_ID": "se-exporter", "PROGRAMDATA": r"D:\Data"},
            Path(r"D:\Data") / "se-exporter" / "state.db",
        ),
        ({"WINSW_SERVICE_ID": "se-exporter"}, Path(r"C:\ProgramData") / "se-exporter" / "state.db"),
    ],
)
def test_windows_service_keeps_its_state_in_programdata(environ: dict[str, str], expected: Path | None) -> None:
    assert WindowsPlatform().default_state_file(environ) == expected
    assert PosixPlatform().default_state_file(environ) is None


def test_windows_hook_environment_keeps_what_windows_programs_need() -> None:
    base = {
        "SYSTEMROOT": r"C:\Windows",
        "PATHEXT": ".COM;.EXE;.PS1",
        "COMSPEC": r"C:\Windows\system32\cmd.exe",
        "TEMP": r"C:\Temp",
        "OTEL_EXPORTER_OTLP_HEADERS": "authorization=secret",
        "HOME": "/root",
    }
    event = ScheduledEvent("E1", "Reboot", "Scheduled", resources=("vm-a",))
    env = event_environment(event, {"SE_VM_NAME": "vm-a"}, base=base, platform=WindowsPlatform())
    assert {k: env[k] for k in ("SYSTEMROOT", "PATHEXT", "COMSPEC", "TEMP")} == {
        k: base[k] for k in ("SYSTEMROOT", "PATHEXT", "COMSPEC", "TEMP")
    }
    assert "OTEL_EXPORTER_OTLP_HEADERS" not in env and "HOME" not in env
    assert env["PATH"] == WindowsPlatform.default_path and env["SE_EVENT_ID"] == "E1"
    posix = event_environment(event, {"SE_VM_NAME": "vm-a"}, base=base, platform=PosixPlatform())
    assert "SYSTEMROOT" not in posix and posix["HOME"] == "/root"


def test_current_is_this_machine() -> None:
    assert current().name == os.name


@pytest.mark.skipif(sys.platform != "linux", reason="POSIX process groups, watched through /proc")
def test_posix_stops_and_kills_a_whole_process_group() -> None:
    platform = PosixPlatform()
    # A shell with a child, the shell ignoring SIGTERM (set after the child started, which keeps the
    # default): ask_to_stop ends the child, kill ends the rest.
    script = "sleep 300 & child=$!; trap '' TERM; echo $child; while :; do sleep 1; done"
    proc = subprocess.Popen(["sh", "-c", script], stdout=subprocess.PIPE, text=True, **platform.hook_popen_options())
    try:
        assert proc.stdout is not None
        child = int(proc.stdout.readline())
        tree = platform.track(proc)
        tree.ask_to_stop()
        wait_for(lambda: not _alive(child), 5, "the child stopped")
        assert proc.poll() is None, "the shell ignores SIGTERM"
        assert tree.remaining() is True
        tree.kill()
        assert proc.wait(5) == -signal.SIGKILL
        assert tree.remaining() is False
    finally:
        platform.track(proc).kill()
        proc.wait(5)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text(encoding="utf-8").split()[2] != "Z"  # a zombie is gone for our purpose


@pytest.mark.skipif(os.name != "posix", reason="POSIX directory fsync")
def test_posix_syncs_a_directory_where_it_can(tmp_path: Path) -> None:
    assert PosixPlatform().sync_directory(tmp_path) is True  # the rename in it is durable

    assert PosixPlatform().sync_directory(tmp_path / "missing") is False  # best effort: said, never raised


def _posix_only_uses(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and ((node.value.id, node.attr) in POSIX_ONLY)
        ):
            found.append(f"{node.value.id}.{node.attr} (line {node.lineno})")
        elif isinstance(node, ast.keyword) and node.arg in ("start_new_session", "preexec_fn"):
            found.append(f"{node.arg}= (line {node.value.lineno})")
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            found += [f"import {n} (line {node.lineno})" for n in names if n.split(".")[0] in POSIX_MODULES]
    return found


def test_nothing_outside_the_platform_module_calls_posix_only_functions() -> None:
    offenders = {
        str(p.relative_to(PACKAGE)): uses
        for p in sorted(PACKAGE.rglob("*.py"))
        if p.relative_to(PACKAGE).parts[0] != "platform" and (uses := _posix_only_uses(p))
    }
    assert offenders == {}


def test_the_check_would_see_a_posix_only_call(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("import os, signal, fcntl\nos.killpg(1, signal.SIGKILL)\nPopen([], start_new_session=True)\n")
    assert len(_posix_only_uses(sample)) == 4


def test_mypy_checks_the_package_as_windows_sees_it() -> None:
    result = subprocess.run(
        # A cache of its own: sharing test_lint's would make each run check everything again for the other.
        [sys.executable, "-m", "mypy", "--platform", "win32", "--cache-dir", ".mypy_cache/win32", "se_exporter"],
        cwd=PACKAGE.parent,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.posix
def test_serve_listens_to_the_platforms_stop_requests() -> None:
    from se_exporter.process import StopRequest, serve

    seen: list[float] = []

    def run(stop: threading.Event) -> None:
        signal.raise_signal(SIGINT)  # a stop request, delivered to this process (os.kill would end it on Windows)
        started = time.monotonic()
        assert stop.wait(5)
        seen.append(time.monotonic() - started)

    closed: list[bool] = []
    assert serve(StopRequest().install((SIGINT,)), lambda: None, run, lambda: closed.append(True)) == 0
    assert seen and seen[0] < 5 and closed == [True]


@pytest.mark.skipif(os.name == "nt", reason="SIGUSR1")
def test_a_signal_the_stop_request_does_not_catch_is_no_stop() -> None:
    """The wakeup socket receives every signal with a Python handler: SIGUSR1 for another handler (the
    heap benchmark's dump) once stopped the exporter."""
    from se_exporter.process import StopRequest

    dumped = threading.Event()
    previous = signal.signal(signal.SIGUSR1, lambda *_: dumped.set())
    stop = StopRequest().install((SIGINT,))
    try:
        signal.raise_signal(signal.SIGUSR1)
        assert dumped.wait(30)
        signal.raise_signal(SIGINT)  # then a stop: the stopping thread has read the bytes before it
        assert stop.event.wait(30) and stop.signal_name == "SIGINT"
    finally:
        stop.restore()
        signal.signal(signal.SIGUSR1, previous)


def test_a_stop_signal_while_the_main_thread_holds_the_stop_events_lock_stops_it() -> None:
    """CI once hung here: the signal came while the poll loop's ``Event.wait`` held the event's lock, and a
    handler that called ``Event.set`` waited for that lock on the same thread, for ever. The handler now does
    nothing; the stopping thread sets the event once the lock is free."""
    from se_exporter.process import StopRequest

    stop = StopRequest().install((SIGINT,))
    try:
        with stop.event._cond:  # type: ignore[attr-defined]  # the lock Event.wait and Event.set take
            signal.raise_signal(SIGINT)  # Python runs the handler here, on this thread, the lock held
            assert not stop.event.is_set()
        assert stop.event.wait(30), "the stopping thread never set the stop"
        assert stop.signal_name == "SIGINT"
    finally:
        stop.restore()


def test_a_stop_requested_before_the_start_closes_without_starting() -> None:
    from se_exporter.process import StopRequest, serve

    stop = StopRequest().install((SIGINT,))
    signal.raise_signal(SIGINT)  # during start-up, before serve() (os.kill would end the process on Windows)
    assert stop.event.wait(30), "the stopping thread never set the stop"
    calls: list[str] = []
    assert serve(stop, lambda: calls.append("start"), lambda _: calls.append("run"), lambda: calls.append("close")) == 0
    assert calls == ["close"] and stop.signal_name == "SIGINT"


def test_windows_locks_the_state_files_first_byte_without_waiting() -> None:
    locked: list[int] = []

    def held_elsewhere(fd: int) -> None:
        raise PermissionError(13, "Permission denied")  # what msvcrt.locking raises for LK_NBLCK

    assert WindowsPlatform(lock_byte=locked.append).lock_exclusively(7) is True and locked == [7]
    assert WindowsPlatform(lock_byte=held_elsewhere).lock_exclusively(7) is False


@pytest.mark.skipif(os.name == "nt", reason="flock")
def test_the_state_lock_is_exclusive_and_names_its_holder(tmp_path: Path) -> None:
    from se_exporter.durable.lock import LockHeld, StateLock

    first = StateLock.acquire(tmp_path / "state.db")
    with pytest.raises(LockHeld) as held:
        StateLock.acquire(tmp_path / "state.db")
    assert held.value.holder == str(os.getpid())
    first.release()
    StateLock.acquire(tmp_path / "state.db").release()


@pytest.mark.parametrize(
    ("base_prefix", "refused"),
    [
        (r"C:\Users\alice\AppData\Local\Programs\Python\Python312", True),  # python.org's "Install Now"
        (r"c:\users\alice\AppData\Local\Microsoft\WindowsApps\PythonSoftwareFoundation.Python.3.12", True),
        (r"C:\Program Files\WindowsApps\PythonSoftwareFoundation.Python.3.12_3.12.2032.0_x64__qbz5n2kfra8p0", True),
        (r"\\?\C:\Users\build\scoop\apps\python\current", True),
        ("C:/Users/alice/miniconda3", True),
        (r"C:\Program Files\Python312", False),  # "Install Python for all users"
        (r"D:\Python\3.12", False),
        (r"C:\ProgramData\Python312", False),
    ],
)
def test_windows_refuses_a_python_the_service_account_cannot_read(base_prefix: str, refused: bool) -> None:
    problem = WindowsPlatform().service_interpreter_problem(base_prefix)
    if refused:
        assert problem is not None and problem.startswith(f"Python at {base_prefix} is installed for one user")
        assert "LocalService" in problem and "--scope machine" in problem
    else:
        assert problem is None


def test_posix_has_no_service_interpreter_problem() -> None:
    assert PosixPlatform().service_interpreter_problem("/home/alice/.pyenv/versions/3.12.1") is None
