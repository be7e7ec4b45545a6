"""Everything that differs between Linux and Windows, behind one small seam.

Nothing else in the package branches on the operating system: the command runner, the state database's
directory fsync and file modes, the default state file and the stop handling ask ``current()``. ``base``
says what the seam offers; ``posix`` and ``windows`` (with its Job Objects) are the two sides. POSIX-only calls
stay in ``posix``, and ``mypy --platform win32`` checks that no Windows path reaches them.
"""

from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING, Any

from se_exporter.platform.base import (
    CREATE_NEW_PROCESS_GROUP,
    CTRL_BREAK_EVENT,
    M_ARENA_MAX,
    PRIVATE_FILE_MODE,
    SIGBREAK,
    SIGHUP,
    SIGINT,
    Platform,
    Process,
    ProcessTree,
)

if TYPE_CHECKING:
    from se_exporter.platform.posix import PosixPlatform, ProcessGroup
    from se_exporter.platform.windows import JobTree, WindowsPlatform

# Each side is imported only when asked for: the Windows side's ctypes and subprocess cost a Linux
# exporter 0.6 MiB it never uses (BENCHMARKS.md).
_SIDES = {"PosixPlatform": "posix", "ProcessGroup": "posix", "JobTree": "windows", "WindowsPlatform": "windows"}

__all__ = [
    "CREATE_NEW_PROCESS_GROUP",
    "CTRL_BREAK_EVENT",
    "M_ARENA_MAX",
    "PRIVATE_FILE_MODE",
    "SIGBREAK",
    "SIGHUP",
    "SIGINT",
    "JobTree",
    "Platform",
    "PosixPlatform",
    "Process",
    "ProcessGroup",
    "ProcessTree",
    "WindowsPlatform",
    "current",
]


def current() -> Platform:
    """The platform this process runs on."""
    side: type[Platform] = __getattr__("WindowsPlatform" if os.name == "nt" else "PosixPlatform")
    return side()


def __getattr__(name: str) -> Any:
    if name not in _SIDES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_SIDES[name]}"), name)
