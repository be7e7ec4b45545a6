"""Windows: console process groups and Job Objects, CTRL+C and CTRL+BREAK, %ProgramData%, byte locks.

``WindowsPlatform`` builds its commands, flags and paths from portable calls, so its choices are unit-tested
on Linux (tests/test_platform.py) and run for real on Windows CPython under Wine (tests/shipped).

**A Windows Job Object** around a command (``JobObject``): every process it starts is in it, and is killed with it.

``taskkill /T`` walks parent ids, which a process that has exited no longer links, and it is missing or
broken in places (Wine has no ``/T``); a Job Object holds every process started inside it, whatever
their parents did. A process the command started before it was added to the job (microseconds after its
start) escapes it: the tree's ``remaining`` then reports only what the job holds.

Only Win32 calls through ctypes; everywhere else ``contain`` returns None (mypy checks both sides).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from se_exporter.platform import (
    CREATE_NEW_PROCESS_GROUP,
    CTRL_BREAK_EVENT,
    SIGBREAK,
    SIGINT,
    LockByte,
    Process,
    ProcessTree,
    Run,
)

JOB_OBJECT_BASIC_ACCOUNTING_INFORMATION = 1

PROCESS_SET_QUOTA = 0x0100

PROCESS_TERMINATE = 0x0001


class _Accounting(ctypes.Structure):
    """JOBOBJECT_BASIC_ACCOUNTING_INFORMATION."""

    _fields_ = [
        ("TotalUserTime", ctypes.c_int64),
        ("TotalKernelTime", ctypes.c_int64),
        ("ThisPeriodTotalUserTime", ctypes.c_int64),
        ("ThisPeriodTotalKernelTime", ctypes.c_int64),
        ("TotalPageFaultCount", ctypes.c_uint32),
        ("TotalProcesses", ctypes.c_uint32),
        ("ActiveProcesses", ctypes.c_uint32),
        ("TotalTerminatedProcesses", ctypes.c_uint32),
    ]


@dataclass(slots=True)
class JobObject:
    handle: int | None

    @classmethod
    def contain(cls, pid: int) -> JobObject | None:
        """A new job holding process ``pid``; None where there are no jobs or the process cannot join one."""
        if sys.platform != "win32":
            return None
        kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)
        job = kernel32.CreateJobObjectW(None, None)
        if not job:
            return None
        process = kernel32.OpenProcess(PROCESS_SET_QUOTA | PROCESS_TERMINATE, False, pid)
        joined = bool(process) and bool(kernel32.AssignProcessToJobObject(job, process))
        if process:
            kernel32.CloseHandle(process)
        if not joined:
            kernel32.CloseHandle(job)
            return None
        return cls(job)

    def terminate(self) -> bool:
        """Kill every process in the job; False if that could not be asked."""
        if sys.platform != "win32" or self.handle is None:
            return False
        return bool(ctypes.WinDLL("kernel32").TerminateJobObject(self.handle, 1))

    def active(self) -> int | None:
        """How many processes of the job still run; None if the job cannot say."""
        if sys.platform != "win32" or self.handle is None:
            return None
        info = _Accounting()
        size = ctypes.sizeof(info)
        kernel32 = ctypes.WinDLL("kernel32")
        if not kernel32.QueryInformationJobObject(
            self.handle, JOB_OBJECT_BASIC_ACCOUNTING_INFORMATION, ctypes.byref(info), size, None
        ):
            return None
        return int(info.ActiveProcesses)

    def close(self) -> None:
        if sys.platform == "win32" and self.handle is not None:
            ctypes.WinDLL("kernel32").CloseHandle(self.handle)
        self.handle = None


Contain = Callable[[int], JobObject | None]  # puts a process in a new Job Object (injected in tests)


class JobTree:
    """A command in a Job Object when it could join one; else the command and what ``taskkill /T`` finds."""

    def __init__(self, process: Process, job: JobObject | None, run: Run) -> None:
        self._process = process
        self._job = job
        self._run = run

    def ask_to_stop(self) -> None:
        with contextlib.suppress(OSError):  # already gone, or no console to send it through
            self._process.send_signal(CTRL_BREAK_EVENT)

    def kill(self) -> None:
        if self._job is None or not self._job.terminate():
            self._run(["taskkill", "/T", "/F", "/PID", str(self._process.pid)])  # /T: what it finds of the tree
        with contextlib.suppress(OSError):  # the command itself, whatever the above could do
            self._process.kill()

    def remaining(self) -> bool | None:
        active = self._job.active() if self._job is not None else None
        if active is not None:
            return active > 0
        return True if self._process.poll() is None else None  # its children cannot be counted

    def close(self) -> None:
        if self._job is not None:
            self._job.close()


class WindowsPlatform:
    name: str = "nt"
    stop_signals: tuple[int, ...] = (SIGINT, SIGBREAK)  # CTRL+C (a WinSW service stop, a console), CTRL+BREAK
    service_account: str | None = r"NT AUTHORITY\LocalService"  # deploy/windows/se-exporter-service.xml
    hook_base_env: tuple[str, ...] = (
        "PATH",
        "PATHEXT",
        "SYSTEMROOT",
        "SYSTEMDRIVE",
        "WINDIR",
        "COMSPEC",
        "TEMP",
        "TMP",
        "USERPROFILE",
        "HOMEDRIVE",
        "HOMEPATH",
        "APPDATA",
        "LOCALAPPDATA",
        "PROGRAMDATA",
        "PROGRAMFILES",
        "PSMODULEPATH",
        "NUMBER_OF_PROCESSORS",
        "PROCESSOR_ARCHITECTURE",
        "USERNAME",
        "TZ",
        "KUBECONFIG",
        "KUBERNETES_SERVICE_HOST",
        "KUBERNETES_SERVICE_PORT",
    )  # without SYSTEMROOT and friends, Windows programs (PowerShell, Python) cannot start
    default_path: str = r"C:\Windows\System32;C:\Windows;C:\Windows\System32\WindowsPowerShell\v1.0"

    def __init__(
        self, run: Run | None = None, lock_byte: LockByte | None = None, contain: Contain | None = None
    ) -> None:
        self._run = run or _run_quietly
        self._lock_byte = lock_byte or _lock_first_byte
        self._contain = contain or JobObject.contain

    def hook_popen_options(self) -> dict[str, Any]:
        return {"creationflags": CREATE_NEW_PROCESS_GROUP}  # CTRL+BREAK reaches the hook and its children

    def track(self, process: Process) -> ProcessTree:
        return JobTree(process, self._contain(process.pid), self._run)

    def sync_directory(self, directory: Path) -> bool:
        """Nothing to do, and nothing done (False): NTFS makes the rename (MoveFileEx) durable; a directory
        cannot be fsynced."""
        return False

    def default_state_file(self, environ: Mapping[str, str]) -> Path | None:
        """Run as a service (WinSW sets WINSW_SERVICE_ID), state and spool live in %ProgramData%."""
        if not environ.get("WINSW_SERVICE_ID"):
            return None
        return Path(environ.get("PROGRAMDATA") or r"C:\ProgramData") / "se-exporter" / "state.db"

    def service_interpreter_problem(self, base_prefix: str) -> str | None:
        """The service runs as ``service_account``, which cannot read another user's profile: a Python
        installed for one user (python.org's default "Install Now", the Microsoft Store build, anything under
        C:\\Users) makes the service fail to start, with nothing in our log."""
        folded = base_prefix.replace("/", "\\").casefold()
        if not (_PER_USER.search(folded) or "\\windowsapps\\" in folded):
            return None
        return (
            f"Python at {base_prefix} is installed for one user: the service's account ({self.service_account}) "
            "cannot read it, so the service would not start. Install Python for all users (python.org installer: "
            "Customize installation, 'Install Python for all users'; or winget install Python.Python.3.12 --scope "
            "machine) and create the virtual environment again from it"
        )

    def limit_memory_arenas(self) -> None:
        """Nothing: the Windows heap has no per-thread arenas to limit."""

    def lock_exclusively(self, fd: int) -> bool:
        """A non-blocking lock of the file's first byte (msvcrt.locking), released when the process ends."""
        try:
            self._lock_byte(fd)
        except OSError:
            return False
        return True


# A drive's Users folder: every profile (C:\\Users\\<name>\\AppData\\Local\\Programs\\Python, pyenv-win, conda).
_PER_USER = re.compile(r"^(?:\\\\\?\\)?[a-z]:\\users\\")


def _lock_first_byte(fd: int) -> None:
    if sys.platform == "win32":
        import msvcrt

        os.lseek(fd, 0, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)  # OSError when another process holds it


def _run_quietly(command: Sequence[str]) -> object:
    """Run ``command`` within 10 s; what went wrong is returned, never raised (the caller falls back)."""
    try:
        return subprocess.run(list(command), capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError) as error:
        return error
