"""Reading the YAML files an operator writes (approval policy, web config, simulator scenarios).

They can stop maintenance from being approved or expose metrics, so reading them is strict: a key
given twice is an error (PyYAML would keep the last silently), and every problem is one line of the
form ``<kind> <file>: <problem>``. What the content must look like is ``schema.decode``'s job.
PyYAML itself is in ``strict_yaml.py``, imported only where a file is read: most VMs have none.
"""

from __future__ import annotations

import errno
import json
import os

from se_exporter.common.files import NotARegularFile, read_bounded
from se_exporter.errors import ConfigError


def show(value: object) -> str:
    """A value as the operator wrote it (JSON-ish), bounded, with its YAML type when that is the surprise."""
    if isinstance(value, bool):
        return f"{json.dumps(value)} (a boolean)"
    try:
        text = json.dumps(value, default=str)
    except (TypeError, ValueError):
        text = repr(value)
    except RecursionError:  # nested deeper than json (and repr) can walk
        text = f"<a {type(value).__name__} nested too deeply to show>"
    return text if len(text) <= 80 else text[:77] + "..."


MAX_FILE_BYTES = 1 << 20  # every file an operator names, read whole before it is parsed (docs/design.md)
FileStamp = tuple[int, ...] | None


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


# What goes wrong binding a port, in the same words on every platform: Windows reports its own (WSAEADDRINUSE:
# "Only one usage of each socket address ... is normally permitted"), which os.strerror() does not know.
_SOCKET_PROBLEMS = {
    errno.EADDRINUSE: "Address already in use",
    errno.EADDRNOTAVAIL: "Cannot assign requested address",
    errno.EACCES: "Permission denied",
    getattr(errno, "WSAEACCES", errno.EACCES): "Permission denied",
}


def socket_problem(exc: OSError) -> str:
    """The words for a port that cannot be listened on, one line, the same on Linux and Windows."""
    return _SOCKET_PROBLEMS.get(exc.errno or 0) or os_problem(exc)


def os_problem(exc: Exception) -> str:
    """The operating system's words for a failed file access ("No such file or directory"), the C library's
    on Windows too (where os.stat's own would say "The system cannot find the file specified")."""
    if not isinstance(exc, OSError):
        return str(exc)
    windows = bool(getattr(exc, "winerror", None)) and not isinstance(exc, NotARegularFile)
    if windows and exc.errno and exc.errno in errno.errorcode:
        return os.strerror(exc.errno)
    return exc.strerror or str(exc)
