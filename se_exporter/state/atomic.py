"""Files that survive a crash: bytes written atomically, read back whole but bounded. No domain type lives here.

A write goes to a temporary file in the same directory, is fsynced, renamed over the old file and
the rename made durable, so a crash leaves either the old or the new content, never a torn one; a
temporary file a crash left behind is removed at the next start (``remove_leftovers``). A read takes
regular files only (a FIFO would block start-up for ever) and never more than the bound it is given.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import BinaryIO

from se_exporter.platform import current


class NotARegularFile(OSError):
    """The path is a FIFO, a device or a directory: nothing se-exporter wrote."""


class FileTooLarge(OSError):
    """The file is larger than the reader may hold; ``size`` says how large."""

    def __init__(self, path: Path, size: int, limit: int) -> None:
        super().__init__(errno.EFBIG, f"{size} bytes, over the bound of {limit}", str(path))
        self.size = size


def open_regular(path: Path) -> BinaryIO | None:
    """The file opened for reading, or None when it does not exist; ``NotARegularFile`` for a FIFO, a
    device or a directory (opening a FIFO does not wait for a writer); other errors are raised."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    except FileNotFoundError:
        return None
    file = os.fdopen(fd, "rb")
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        file.close()
        raise NotARegularFile(errno.EINVAL, "not a regular file", str(path))
    return file


def read_bounded(path: Path, limit: int) -> bytes | None:
    """The file's content, or None when it does not exist; ``FileTooLarge`` beyond ``limit`` bytes,
    ``NotARegularFile`` for anything but a regular file (other errors are raised)."""
    file = open_regular(path)
    if file is None:
        return None
    with file:
        size = os.fstat(file.fileno()).st_size
        if size > limit:
            raise FileTooLarge(path, size, limit)
        data = file.read(limit + 1)
    if len(data) > limit:  # it grew while we read
        raise FileTooLarge(path, len(data), limit)
    return data


def check_writable(directory: Path) -> None:
    """Create ``directory`` if needed and prove a file can be written in it; ``OSError`` if not."""
    if directory.exists() and not directory.is_dir():  # mkdir would say "File exists"
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(directory))
    directory.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryFile(dir=directory):
        pass


def write_atomically(path: Path, payload: bytes | Iterable[bytes]) -> None:
    """Replace ``path`` with ``payload`` (bytes, or chunks written as they come, never joined in memory):
    a temporary file in the same directory, fsynced, renamed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=_temporary_prefix(path), suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as out:  # mkstemp creates it 0600 on POSIX: the state is nobody else's
            out.writelines([payload] if isinstance(payload, bytes) else payload)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    current().sync_directory(path.parent)  # the rename itself made durable, where the platform can


def remove_leftovers(path: Path) -> int:
    """Remove the temporary files of ``write_atomically(path, ...)`` that a crash left behind (only the
    owner of ``path`` may call it: it holds the state lock); returns how many were removed."""
    removed = 0
    prefix = _temporary_prefix(path)
    with contextlib.suppress(OSError):
        for leftover in path.parent.iterdir():
            if leftover.name.startswith(prefix) and leftover.name.endswith(".tmp"):
                with contextlib.suppress(OSError):
                    leftover.unlink()
                    removed += 1
    return removed


def _temporary_prefix(path: Path) -> str:
    return f".{path.name}."
