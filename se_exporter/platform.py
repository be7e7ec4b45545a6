"""Everything that differs between Linux and Windows, behind one small seam.

Nothing else in the package branches on the operating system: the hook runner, the atomic writer,
the spool, the default state file and the stop handling ask ``current()``. ``WindowsPlatform`` only
builds commands, flags and paths from portable calls, so its choices are unit-tested on Linux
(tests/test_platform.py); ``PosixPlatform``'s calls are POSIX-only, and ``mypy --platform win32``
checks that no Windows path reaches them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

# Win32 values (subprocess and signal define them only on Windows; the seam needs them everywhere).
CREATE_NEW_PROCESS_GROUP = 0x00000200  # the hook and its children form one console process group
CTRL_BREAK_EVENT = 1  # what GenerateConsoleCtrlEvent sends to that group
SIGBREAK = 21  # how Python sees CTRL+BREAK
SIGINT = 2  # how Python sees CTRL+C (what a WinSW service stop sends), and the same number on POSIX
SIGHUP = 1  # POSIX (Windows has none)
M_ARENA_MAX = -8  # glibc's mallopt parameter
PRIVATE_FILE_MODE = 0o600  # POSIX permissions of the state file and the spool (Windows: the directory's ACL)

Run = Callable[[Sequence[str]], object]  # runs a command to completion (injected in tests)
LockByte = Callable[[int], None]  # locks a file's first byte or raises OSError (injected in tests)


class Process(Protocol):
    """What the seam needs of a started process (``subprocess.Popen``)."""

    @property
    def pid(self) -> int: ...

    def send_signal(self, sig: int) -> None: ...


class Platform(Protocol):
    name: str
    stop_signals: tuple[int, ...]  # what asks the exporter to stop
    hook_base_env: tuple[str, ...]  # environment variables a hook inherits (besides inherit_env)
    default_path: str  # the hook's PATH when the exporter has none

    def hook_popen_options(self) -> dict[str, Any]: ...

    def ask_to_stop(self, process: Process) -> None: ...

    def kill(self, process: Process) -> None: ...

    def sync_directory(self, directory: Path) -> bool: ...

    def default_state_file(self, environ: Mapping[str, str]) -> Path | None: ...

    def lock_exclusively(self, fd: int) -> bool: ...

    def limit_memory_arenas(self) -> None: ...


class PosixPlatform:
    name: str = "posix"
    # SIGHUP too: a closed terminal or a supervisor's hang-up is a clean stop, not a death without a save.
    stop_signals: tuple[int, ...] = (signal.SIGTERM.value, SIGINT, SIGHUP)
    hook_base_env: tuple[str, ...] = (
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "LANG",
        "LC_ALL",
        "LC_CTYPE",
        "TZ",
        "TMPDIR",
        "KUBECONFIG",
        "KUBERNETES_SERVICE_HOST",
        "KUBERNETES_SERVICE_PORT",
    )
    default_path: str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

    def hook_popen_options(self) -> dict[str, Any]:
        return {"start_new_session": True}  # its own process group: a timeout stops its children too

    def ask_to_stop(self, process: Process) -> None:
        if sys.platform != "win32":
            with contextlib.suppress(ProcessLookupError, PermissionError):  # the group is already gone
                os.killpg(process.pid, signal.SIGTERM)

    def kill(self, process: Process) -> None:
        if sys.platform != "win32":
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)

    def sync_directory(self, directory: Path) -> bool:
        """Make a rename in ``directory`` durable (fsync of the directory); False where that is not possible
        (a file system that refuses it, a directory gone)."""
        try:
            fd = os.open(directory, os.O_RDONLY)
        except OSError:
            return False
        try:
            os.fsync(fd)
        except OSError:
            return False
        finally:
            os.close(fd)
        return True

    def default_state_file(self, environ: Mapping[str, str]) -> Path | None:
        return None  # the Docker image, the unit and the DaemonSet each name theirs

    def limit_memory_arenas(self) -> None:
        """glibc gives each thread that allocates an arena of its own: with a dozen threads (web workers,
        log shipper, approval poster) their fragmentation was a fifth of the peak memory under large
        documents. Two arenas, as MALLOC_ARENA_MAX=2 would, set before any thread starts; elsewhere (musl,
        macOS) nothing."""
        if sys.platform == "linux":
            import ctypes

            with contextlib.suppress(OSError, AttributeError):
                ctypes.CDLL(None).mallopt(M_ARENA_MAX, 2)

    def lock_exclusively(self, fd: int) -> bool:
        """Take the open file's lock without waiting (released when the process ends); False: held elsewhere.
        flock, not fcntl locks: held per open file, so closing another descriptor of it releases nothing."""
        if sys.platform != "win32":
            import fcntl

            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
        return True


class WindowsPlatform:
    name: str = "nt"
    stop_signals: tuple[int, ...] = (SIGINT, SIGBREAK)  # CTRL+C (a WinSW service stop, a console), CTRL+BREAK
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

    def __init__(self, run: Run | None = None, lock_byte: LockByte | None = None) -> None:
        self._run = run or _run_quietly
        self._lock_byte = lock_byte or _lock_first_byte

    def hook_popen_options(self) -> dict[str, Any]:
        return {"creationflags": CREATE_NEW_PROCESS_GROUP}  # CTRL+BREAK reaches the hook and its children

    def ask_to_stop(self, process: Process) -> None:
        with contextlib.suppress(OSError):  # already gone, or no console to send it through
            process.send_signal(CTRL_BREAK_EVENT)

    def kill(self, process: Process) -> None:
        self._run(["taskkill", "/T", "/F", "/PID", str(process.pid)])  # /T: the whole tree

    def sync_directory(self, directory: Path) -> bool:
        """Nothing to do, and nothing done (False): NTFS makes the rename (MoveFileEx) durable; a directory
        cannot be fsynced."""
        return False

    def default_state_file(self, environ: Mapping[str, str]) -> Path | None:
        """Run as a service (WinSW sets WINSW_SERVICE_ID), state and spool live in %ProgramData%."""
        if not environ.get("WINSW_SERVICE_ID"):
            return None
        return Path(environ.get("PROGRAMDATA") or r"C:\ProgramData") / "se-exporter" / "state.json"

    def limit_memory_arenas(self) -> None:
        """Nothing: the Windows heap has no per-thread arenas to limit."""

    def lock_exclusively(self, fd: int) -> bool:
        """A non-blocking lock of the file's first byte (msvcrt.locking), released when the process ends."""
        try:
            self._lock_byte(fd)
        except OSError:
            return False
        return True


def _lock_first_byte(fd: int) -> None:
    if sys.platform == "win32":
        import msvcrt

        os.lseek(fd, 0, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)  # OSError when another process holds it


def _run_quietly(command: Sequence[str]) -> object:
    return subprocess.run(list(command), capture_output=True, timeout=30, check=False)


def current() -> Platform:
    """The platform this process runs on."""
    return WindowsPlatform() if os.name == "nt" else PosixPlatform()
