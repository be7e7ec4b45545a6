"""Everything that differs between Linux and Windows, behind one small seam.

Nothing else in the package branches on the operating system: the command runner, the state database's
directory fsync and file modes, the default state file and the stop handling ask ``current()``. This module
says what the seam offers (its protocols, and the Win32 and glibc numbers it needs everywhere); ``posix`` and
``windows`` (with its Job Objects) are the two sides. POSIX-only calls stay in ``posix``, and
``mypy --platform win32`` checks that no Windows path reaches them.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from se_exporter.platform.posix import PosixPlatform as PosixPlatform
    from se_exporter.platform.posix import ProcessGroup as ProcessGroup
    from se_exporter.platform.windows import JobTree as JobTree
    from se_exporter.platform.windows import WindowsPlatform as WindowsPlatform

# Each side is imported only when asked for: the Windows side's ctypes and subprocess cost a Linux
# exporter 0.6 MiB it never uses (BENCHMARKS.md).
_SIDES = {"PosixPlatform": "posix", "ProcessGroup": "posix", "JobTree": "windows", "WindowsPlatform": "windows"}


# Win32 values (subprocess and signal define them only on Windows; the seam needs them everywhere).
CREATE_NEW_PROCESS_GROUP = 0x00000200  # the hook and its children form one console process group
CTRL_BREAK_EVENT = 1  # what GenerateConsoleCtrlEvent sends to that group
SIGBREAK = 21  # how Python sees CTRL+BREAK
SIGINT = 2  # how Python sees CTRL+C (what a WinSW service stop sends), and the same number on POSIX
SIGHUP = 1  # POSIX (Windows has none)
M_ARENA_MAX = -8  # glibc's mallopt parameters
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 1 << 20
PRIVATE_FILE_MODE = 0o600  # POSIX permissions of the state file and the spool (Windows: the directory's ACL)

Run = Callable[[Sequence[str]], object]  # runs a command to completion, never raising (injected in tests)
LockByte = Callable[[int], None]  # locks a file's first byte or raises OSError (injected in tests)


class Process(Protocol):
    """What the seam needs of a started process (``subprocess.Popen``)."""

    @property
    def pid(self) -> int: ...

    def send_signal(self, sig: int) -> None: ...

    def kill(self) -> None: ...

    def poll(self) -> int | None: ...


class ProcessTree(Protocol):
    """A started command and every process it starts: stopped together, and asked what is left."""

    def ask_to_stop(self) -> None: ...

    def kill(self) -> None:
        """Kill every process of the tree that can be killed; never raises, never waits."""

    def remaining(self) -> bool | None:
        """Whether a process of the tree still runs; None when the platform cannot tell."""

    def close(self) -> None: ...


class Platform(Protocol):
    name: str
    stop_signals: tuple[int, ...]  # what asks the exporter to stop
    service_account: str | None  # the account the shipped service runs as, when it is not the installer's
    hook_base_env: tuple[str, ...]  # environment variables a hook inherits (besides inherit_env)
    default_path: str  # the hook's PATH when the exporter has none

    def hook_popen_options(self) -> dict[str, Any]: ...

    def track(self, process: Process) -> ProcessTree:
        """The tree of a command just started with ``hook_popen_options()``."""

    def sync_directory(self, directory: Path) -> bool: ...

    def default_state_file(self, environ: Mapping[str, str]) -> Path | None: ...

    def lock_exclusively(self, fd: int) -> bool: ...

    def limit_memory_arenas(self) -> None: ...

    def service_interpreter_problem(self, base_prefix: str) -> str | None:
        """Why ``service_account`` could not run the Python at ``base_prefix``, or None."""
        ...


def current() -> Platform:
    """The platform this process runs on."""
    side: type[Platform] = __getattr__("WindowsPlatform" if os.name == "nt" else "PosixPlatform")
    return side()


def __getattr__(name: str) -> Any:
    if name not in _SIDES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_SIDES[name]}"), name)
