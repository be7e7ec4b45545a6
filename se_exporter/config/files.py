"""Reading the YAML files an operator writes (approval policy, web config, simulator scenarios).

They can stop maintenance from being approved or expose metrics, so reading them is strict: a key
given twice is an error (PyYAML would keep the last silently), and every problem is one line of the
form ``<kind> <file>: <problem>``. What the content must look like is ``schema.decode``'s job.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import yaml

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


class _StrictLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that rejects a key given twice in one mapping."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[object] = set()
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = loader.construct_object(key_node, deep=True)
        try:
            duplicate = key in seen
        except TypeError:  # unhashable key: let PyYAML report it
            continue
        if duplicate:
            raise yaml.constructor.ConstructorError(
                None, None, f"key {show(key)} is given twice in one mapping", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node, deep=True)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


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


def load_yaml(prefix: str, text: str, error: type[Exception] = ConfigError) -> object:
    """Parse YAML, refusing a key given twice; ``error("<prefix>: not valid YAML: ...")`` in one line."""
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise error(f"{prefix}: not valid YAML: {_one_line(exc)}") from None
    except RecursionError:  # PyYAML composes recursively: "[[[[..." thousands deep
        raise error(f"{prefix}: not valid YAML: nested too deeply") from None


def _one_line(error: yaml.YAMLError) -> str:
    """PyYAML's message spans lines and names "<unicode string>"; the operator needs what and where."""
    if isinstance(error, yaml.MarkedYAMLError) and error.problem:
        mark = error.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        context = f"{error.context}: " if error.context else ""
        return f"{context}{error.problem}{where}"
    return " ".join(str(error).split())
