"""Linux (and any POSIX system): process groups, signals, directory fsync, flock."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from se_exporter.platform import (
    M_ARENA_MAX,
    M_MMAP_THRESHOLD,
    MMAP_THRESHOLD_BYTES,
    SIGHUP,
    SIGINT,
    Process,
    ProcessTree,
)


@dataclass(slots=True)
class ProcessGroup:
    """A command started in a session of its own: its process group is the tree."""

    pgid: int
    killed: bool = False  # SIGKILL reached the group: nothing of it runs on (its zombies may wait for a reaper)

    def ask_to_stop(self) -> None:
        self._signal(signal.SIGTERM)

    def kill(self) -> None:
        if sys.platform != "win32":
            self.killed = self._signal(signal.SIGKILL) or self.killed

    def remaining(self) -> bool | None:
        if sys.platform == "win32":
            return None
        if self.killed:
            return False
        try:
            os.killpg(self.pgid, 0)  # signal 0: is anyone of the group left?
        except ProcessLookupError:
            return False
        except PermissionError:  # someone is, under another user
            return True
        return True

    def close(self) -> None:
        """Nothing to release: a process group is no handle."""

    def _signal(self, sig: int) -> bool:
        """Send ``sig`` to the group; False if it is gone or not ours."""
        if sys.platform != "win32":
            try:
                os.killpg(self.pgid, sig)
            except (ProcessLookupError, PermissionError):
                return False
        return True


class PosixPlatform:
    name: str = "posix"
    # SIGHUP too: a closed terminal or a supervisor's hang-up is a clean stop, not a death without a save.
    stop_signals: tuple[int, ...] = (signal.SIGTERM.value, SIGINT, SIGHUP)
    service_account: str | None = None  # systemd runs the unit as a user it names, who can read it
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

    def track(self, process: Process) -> ProcessTree:
        return ProcessGroup(process.pid)

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

    def service_interpreter_problem(self, base_prefix: str) -> str | None:
        """None: no service account of ours to read it (``service_account``)."""
        return None

    def limit_memory_arenas(self) -> None:
        """glibc gives each thread that allocates an arena of its own: with a dozen threads (web workers,
        log shipper, approval poster) their fragmentation was a fifth of the peak memory under large
        documents. Two arenas, as MALLOC_ARENA_MAX=2 would, set before any thread starts. And blocks of
        1 MiB or more always mapped apart, as MALLOC_MMAP_THRESHOLD_ would: glibc raises its threshold
        each time such a block is freed, so later multi-megabyte documents, records and state were carved
        from the arenas and fragmented them (3.5 MB Descriptions at every poll: peaks of 82 to 98 MiB,
        74 to 75 with the threshold fixed; tests/hostile/test_memory_bounds.py). Elsewhere (musl, macOS)
        nothing."""
        if sys.platform == "linux":
            import ctypes

            with contextlib.suppress(OSError, AttributeError):
                libc = ctypes.CDLL(None)
                libc.mallopt(M_ARENA_MAX, 2)
                libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)

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
