"""Files that survive a crash: bytes written atomically, read back whole. No domain type lives here.

A write goes to a temporary file in the same directory, is fsynced, renamed over the old file and
the rename made durable, so a crash leaves either the old or the new content, never a torn one.
"""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path

from se_exporter.platform import current


def read_bytes(path: Path) -> bytes | None:
    """The file's content, or None when it does not exist (other errors are raised)."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def check_writable(directory: Path) -> None:
    """Create ``directory`` if needed and prove a file can be written in it; ``OSError`` if not."""
    if directory.exists() and not directory.is_dir():  # mkdir would say "File exists"
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(directory))
    directory.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryFile(dir=directory):
        pass


def write_atomically(path: Path, payload: bytes) -> None:
    """Replace ``path`` with ``payload``: a temporary file in the same directory, fsynced, renamed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as out:  # mkstemp creates it 0600 on POSIX: the state is nobody else's
            out.write(payload)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    current().sync_directory(path.parent)  # the rename itself made durable, where the platform can
