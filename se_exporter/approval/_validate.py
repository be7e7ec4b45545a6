"""Strict YAML reading and typed field access for the approval policy file.

Every problem raises ``ConfigError`` as ``approval config <file>: <key path>: <problem>``, so the
operator sees which key is wrong and why before the exporter starts.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
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
    return text if len(text) <= 80 else text[:77] + "..."


class _StrictLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that rejects a key given twice in one mapping (PyYAML keeps the last silently)."""


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


def load_yaml(source: str, text: str) -> object:
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise ConfigError(f"approval config {source}: not valid YAML: {exc}") from None


class Fields:
    """One mapping of the policy file being validated: typed getters that name the key on error."""

    def __init__(self, source: str, where: str, value: object, allowed: Sequence[str]) -> None:
        self.source = source
        self.where = where
        if not isinstance(value, dict):
            self.fail_at(where or "(top level)", f"must be a mapping, got {show(value)}")
        for key in value:
            if key not in allowed:
                self.fail_at(self.path(str(key)), f"unknown key; expected one of: {', '.join(allowed)}")
        self.data: dict[str, object] = value

    def path(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def fail_at(self, path: str, problem: str) -> NoReturn:
        raise ConfigError(f"approval config {self.source}: {path}: {problem}")

    def fail(self, key: str, problem: str) -> NoReturn:
        self.fail_at(self.path(key), problem)

    def has(self, key: str) -> bool:
        return key in self.data

    def boolean(self, key: str, default: bool) -> bool:
        value = self.data.get(key, default)
        if not isinstance(value, bool):
            self.fail(key, f"must be true or false, got {show(value)}")
        return value

    def integer(self, key: str, minimum: int) -> int | None:
        if key not in self.data:
            return None
        value = self.data[key]
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            self.fail(key, f"must be an integer >= {minimum}, got {show(value)}")
        return value

    def positive_number(self, key: str, default: float) -> float:
        value = self.data.get(key, default)
        if not isinstance(value, int | float) or isinstance(value, bool) or not 0 < value < float("inf"):
            self.fail(key, f"must be a number of seconds > 0, got {show(value)}")
        return float(value)

    def string(self, key: str, *, required: bool = False) -> str | None:
        if key not in self.data:
            if required:
                self.fail(key, "is required")
            return None
        value = self.data[key]
        if not isinstance(value, str) or not value.strip():
            self.fail(key, f"must be a non-empty string, got {show(value)}")
        return value

    def choice(self, key: str, choices: Sequence[str], default: str) -> str:
        value = self.data.get(key, default)
        if value not in choices:
            self.fail(key, f"must be one of {', '.join(choices)}, got {show(value)}")
        return str(value)

    def string_list(
        self, key: str, *, choices: Sequence[str] | None = None, required: bool = False
    ) -> tuple[str, ...] | None:
        """A non-empty list of distinct non-empty strings (each one of ``choices`` when given)."""
        if key not in self.data:
            if required:
                self.fail(key, "is required")
            return None
        value = self.data[key]
        if not isinstance(value, list) or not value:
            self.fail(key, f"must be a non-empty list of strings, got {show(value)}")
        for index, item in enumerate(value):
            where = f"{key}[{index}]"
            if not isinstance(item, str) or not item:
                self.fail(where, f"must be a non-empty string, got {show(item)}")
            if choices is not None and item not in choices:
                self.fail(where, f"unknown value {show(item)}; known values: {', '.join(choices)}")
            if item in value[:index]:
                self.fail(where, f"{show(item)} is listed twice")
        return tuple(value)
