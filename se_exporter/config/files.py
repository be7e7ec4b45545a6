"""Reading the YAML files an operator writes (approval policy, web config, simulator scenarios).

They can stop maintenance from being approved or expose metrics, so reading them is strict: a key
given twice is an error (PyYAML would keep the last silently), and every problem is one line of the
form ``<kind> <file>: <problem>``. What the content must look like is ``schema.decode``'s job.
PyYAML itself is in ``strict_yaml.py``, imported only where a file is read: most VMs have none.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

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


def read_text(prefix: str, path: str | os.PathLike[str], error: type[Exception] = ConfigError) -> str:
    """The file's text; ``error("<prefix>: cannot read the file: ...")`` saying why it cannot be read."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise error(f"{prefix}: cannot read the file: {os_problem(exc)}") from None
    except UnicodeDecodeError:
        raise error(f"{prefix}: the file is not UTF-8 text") from None


def os_problem(exc: Exception) -> str:
    """The operating system's words for a failed file access ("No such file or directory")."""
    return exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
