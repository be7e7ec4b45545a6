"""A small tmpfs, to fill a real file system: how a full disk behaves, not a mock of it."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

from tests.support.tools import unavailable


@contextlib.contextmanager
def small_tmpfs(where: Path, size_kib: int = 512, inodes: int | None = None) -> Iterator[Path]:
    """Mount a ``size_kib`` tmpfs (with at most ``inodes`` files) at ``where`` (needs root, or
    CAP_SYS_ADMIN in a container)."""
    problem = mount_tmpfs(where, size_kib, inodes)
    if problem:
        unavailable(f"cannot mount a tmpfs to make a full disk (needs root or CAP_SYS_ADMIN): {problem}")
    try:
        yield where
    finally:
        unmount(where)


def mount_tmpfs(where: Path, size_kib: int, inodes: int | None = None) -> str:
    """Mount a tmpfs at ``where``; returns "" or why it could not."""
    where.mkdir(parents=True, exist_ok=True)
    options = f"size={size_kib}k,mode=0700" + (f",nr_inodes={inodes}" if inodes else "")
    try:
        mounted = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)], capture_output=True, text=True, check=False
        )
    except OSError as error:
        return str(error)
    return "" if mounted.returncode == 0 else mounted.stderr.strip() or f"mount exited {mounted.returncode}"


def unmount(where: Path) -> None:
    subprocess.run(["umount", "-l", str(where)], check=False)


def fill(folder: Path) -> Path:
    """Fill the file system of ``folder`` to the last byte; delete the returned file to make room again."""
    filler = folder / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        for size in (65536, 4096, 1):  # big steps, then down to the last byte
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0" * size)
    finally:
        os.close(fd)
    return filler
