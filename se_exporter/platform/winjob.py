"""A Windows Job Object around a command: every process it starts is in it, and is killed with it.

``taskkill /T`` walks parent ids, which a process that has exited no longer links, and it is missing or
broken in places (Wine has no ``/T``); a Job Object holds every process started inside it, whatever
their parents did. A process the command started before it was added to the job (microseconds after its
start) escapes it: the tree's ``remaining`` then reports only what the job holds.

Only Win32 calls through ctypes; everywhere else ``contain`` returns None (mypy checks both sides).
"""

from __future__ import annotations

import ctypes
import sys
from dataclasses import dataclass

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
