"""PyYAML with a key given twice refused, and its errors in one line. About 1 MiB of memory: imported
only where a file is read (``web/config.py`` imports it when a web config is given)."""

from __future__ import annotations

from typing import Any

import yaml

from se_exporter.config.files import show
from se_exporter.errors import ConfigError


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
