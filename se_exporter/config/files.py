"""Strict YAML configuration files (the approval policy, the web config).

Both files are operator input that can stop maintenance from being approved or expose metrics, so
reading them is strict: a key given twice is an error (PyYAML would keep the last silently), unknown
keys are errors, and every problem is a ``ConfigError`` of the form ``<kind> <file>: <key path>:
<problem>``, naming the key before the exporter starts.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

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


def read_text(kind: str, path: str | os.PathLike[str]) -> str:
    """The configuration file's text; ``ConfigError`` saying why it cannot be read."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{kind} {os.fspath(path)}: cannot read the file: {os_problem(exc)}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{kind} {os.fspath(path)}: the file is not UTF-8 text") from None


def os_problem(exc: Exception) -> str:
    """The operating system's words for a failed file access ("No such file or directory")."""
    return exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)


def load_yaml(kind: str, source: str, text: str) -> object:
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise ConfigError(f"{kind} {source}: not valid YAML: {_one_line(exc)}") from None
    except RecursionError:  # PyYAML composes recursively: "[[[[..." thousands deep
        raise ConfigError(f"{kind} {source}: not valid YAML: nested too deeply") from None


def _one_line(error: yaml.YAMLError) -> str:
    """PyYAML's message spans lines and names "<unicode string>"; the operator needs what and where."""
    if isinstance(error, yaml.MarkedYAMLError) and error.problem:
        mark = error.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        context = f"{error.context}: " if error.context else ""
        return f"{context}{error.problem}{where}"
    return " ".join(str(error).split())


class Fields:
    """One mapping of a configuration file: unknown keys are errors; getters name the key on error.

    Subclasses set ``kind`` (the message prefix) and add the typed getters their file needs.
    """

    kind = "config"

    def __init__(self, source: str, where: str, value: object, allowed: Sequence[str] | None) -> None:
        self.source = source
        self.where = where
        if not isinstance(value, dict):
            self.fail_at(where or "(top level)", f"must be a mapping, got {show(value)}")
        for key in value:
            if not isinstance(key, str):
                self.fail_at(self.key_path(str(key)), "keys must be strings")
            self.check_key(key)
            if allowed is not None and key not in allowed:
                self.fail(key, f"unknown key; expected one of: {', '.join(allowed)}")
        self.data: dict[str, object] = value

    def check_key(self, key: str) -> None:
        """Hook for keys a file rejects with a specific reason."""

    def key_path(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def fail_at(self, path: str, problem: str) -> NoReturn:
        raise ConfigError(f"{self.kind} {self.source}: {path}: {problem}")

    def fail(self, key: str, problem: str) -> NoReturn:
        self.fail_at(self.key_path(key), problem)

    def has(self, key: str) -> bool:
        return key in self.data

    def get(self, key: str) -> object:
        return self.data.get(key)

    def boolean(self, key: str, default: bool) -> bool:
        value = self.data.get(key, default)
        if not isinstance(value, bool):
            self.fail(key, f"must be true or false, got {show(value)}")
        return value

    def check_strings(self, key: str, value: list[object], choices: Sequence[str] | None) -> tuple[str, ...]:
        """Each item a non-empty string (one of ``choices`` when given)."""
        for index, item in enumerate(value):
            where = f"{key}[{index}]"
            if not isinstance(item, str) or not item:
                self.fail(where, f"must be a non-empty string, got {show(item)}")
            if choices is not None and item not in choices:
                self.fail(where, f"unknown value {show(item)}; known values: {', '.join(choices)}")
        return tuple(str(item) for item in value)
