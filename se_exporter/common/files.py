"""Reading a file whole, bounded: the operator's files and the files of earlier releases alike, and what
tells that one changed (``stamp``).

Only regular files are read: a FIFO (whose open would wait for a writer), a device (a link to /dev/zero) or a
directory is refused before a byte is read, and so is a file larger than the reader's bound, with the same
words on Linux and Windows (where opening a directory says "Permission denied").
"""

from __future__ import annotations

import errno
import os
import stat
from typing import BinaryIO

from se_exporter.errors import ConfigError, os_problem

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a named pipe"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


MAX_FILE_BYTES = 1 << 20  # every file an operator names, read whole before it is parsed (docs/design.md)
FileStamp = tuple[int, ...] | None


class NotARegularFile(OSError):
    """A file that is not read: not a regular file, or larger than the bound; ``strerror`` says which."""


def open_regular(path: str | os.PathLike[str]) -> BinaryIO:
    """The regular file at ``path`` opened for reading (through links); ``NotARegularFile`` for anything
    else, ``FileNotFoundError`` and the other ``OSError`` as they come."""
    mode = os.stat(path).st_mode  # before opening: opening a FIFO waits for a writer
    if not stat.S_ISREG(mode):
        raise NotARegularFile(errno.EINVAL, f"it is {_kind(mode)}, not a regular file", str(path))
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    file = os.fdopen(fd, "rb")
    if not stat.S_ISREG(mode := os.fstat(fd).st_mode):  # replaced between the two looks
        file.close()
        raise NotARegularFile(errno.EINVAL, f"it is {_kind(mode)}, not a regular file", str(path))
    return file


def read_bounded(path: str | os.PathLike[str], limit: int) -> bytes:
    """The regular file's bytes, at most ``limit``; ``NotARegularFile`` beyond it (see ``open_regular``)."""
    with open_regular(path) as file:
        data = file.read(limit + 1)
    if len(data) > limit:
        raise NotARegularFile(errno.EFBIG, f"it is larger than {_size(limit)}", str(path))
    return data


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a file")


def _size(limit: int) -> str:
    return f"{limit >> 20} MiB" if limit % (1 << 20) == 0 else f"{limit} bytes"


def stamp(path: str | os.PathLike[str]) -> FileStamp:
    """What changes when the file at ``path`` is rewritten or replaced (through links: a Kubernetes Secret's
    update swaps the link's target); None while it cannot be looked at."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino, st.st_dev)


def read_text(prefix: str, path: str | os.PathLike[str], error: type[Exception] = ConfigError) -> str:
    """The file's text; ``error("<prefix>: cannot read the file: ...")`` saying why it cannot be read."""
    try:
        return read_bounded(path, MAX_FILE_BYTES).decode("utf-8")
    except OSError as exc:
        raise error(f"{prefix}: cannot read the file: {os_problem(exc)}") from None
    except UnicodeDecodeError:
        raise error(f"{prefix}: the file is not UTF-8 text") from None
