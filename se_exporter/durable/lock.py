"""One exporter per state file: a lock next to it (``<state file>.lock``), held for the process's life.

Two exporters on one state file would each approve every event (and run its hook) and each report
every transition. The second one is refused at start, naming the holder; the operating system drops
the lock when the holder ends, however it ends (``kill -9`` included), so a stale lock never blocks.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path

from se_exporter.platform import PRIVATE_FILE_MODE, Platform, current


class LockHeld(OSError):
    """Another process holds the state file's lock; ``holder`` is what it wrote there (its pid)."""

    def __init__(self, path: Path, holder: str) -> None:
        super().__init__(errno.EBUSY, f"locked by another se-exporter (pid {holder or 'unknown'})", str(path))
        self.holder = holder


def lock_path(state_file: Path) -> Path:
    return state_file.with_name(state_file.name + ".lock")


class StateLock:
    """``StateLock.acquire(state_file)`` or ``LockHeld``; ``release()`` at shutdown (the end of the process
    releases it anyway)."""

    def __init__(self, fd: int) -> None:
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, state_file: Path, platform: Platform | None = None) -> StateLock:
        path = lock_path(state_file)
        flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
        fd = os.open(path, flags, PRIVATE_FILE_MODE)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise OSError(errno.EINVAL, "not a regular file", str(path))
            if not (platform or current()).lock_exclusively(fd):
                raise LockHeld(path, _holder(fd))
            os.ftruncate(fd, 0)
            os.lseek(fd, 0, os.SEEK_SET)
            os.write(fd, f"{os.getpid()}\n".encode())
        except BaseException:
            os.close(fd)
            raise
        return cls(fd)

    def release(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None


def _holder(fd: int) -> str:
    with contextlib.suppress(OSError):
        os.lseek(fd, 0, os.SEEK_SET)
        return os.read(fd, 32).decode("ascii", "replace").strip()
    return ""
