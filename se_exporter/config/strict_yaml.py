"""PyYAML with a key given twice refused, and its errors in one line. About 1 MiB of memory: imported
only where a file is read (``web/config.py`` imports it when a web config is given)."""

from __future__ import annotations

import re
from typing import Any

import yaml

from se_exporter.errors import ConfigError, show


class _StrictLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that rejects a key given twice in one mapping and reads plain scalars as YAML 1.2's
    core schema does: ``010`` is 10 (not 8), ``1:30`` and ``2024-01-01`` are strings (not 90 and a date),
    ``on``/``yes``/``no`` are strings (only ``true``/``false`` are booleans). A policy's numbers mean what
    they look like."""

    yaml_implicit_resolvers = {}  # noqa: RUF012 - PyYAML keeps its resolvers on the class: none of YAML 1.1


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
# YAML 1.2 core schema (https://yaml.org/spec/1.2.2/#1032-tag-resolution), tags and first characters.
_CORE = (
    ("tag:yaml.org,2002:null", r"^(?:~|null|Null|NULL|)$", ["~", "n", "N", ""]),
    ("tag:yaml.org,2002:bool", r"^(?:true|True|TRUE|false|False|FALSE)$", list("tTfF")),
    ("tag:yaml.org,2002:int", r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$", list("-+0123456789")),
    (
        "tag:yaml.org,2002:float",
        r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
        r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$",
        list("-+.0123456789"),
    ),
)
for _tag, _pattern, _first in _CORE:
    _StrictLoader.add_implicit_resolver(_tag, re.compile(_pattern), _first)


def _construct_int(loader: _StrictLoader, node: yaml.ScalarNode) -> int:
    text = str(loader.construct_scalar(node))
    if text.startswith(("0o", "0x")):
        return int(text[2:], 8 if text[1] == "o" else 16)
    return int(text, 10)  # leading zeros are decimal in YAML 1.2


def _construct_float(loader: _StrictLoader, node: yaml.ScalarNode) -> float:
    text = str(loader.construct_scalar(node)).lower()
    if text.endswith(".inf"):
        return float("-inf") if text.startswith("-") else float("inf")
    return float("nan") if text == ".nan" else float(text)


_StrictLoader.add_constructor("tag:yaml.org,2002:int", _construct_int)
_StrictLoader.add_constructor("tag:yaml.org,2002:float", _construct_float)


MAX_EXPANDED_NODES = 100_000  # values once aliases are expanded: a 1 MiB file of plain YAML holds far fewer


def load_yaml(prefix: str, text: str, error: type[Exception] = ConfigError) -> object:
    """Parse YAML, refusing a key given twice; ``error("<prefix>: not valid YAML: ...")`` in one line.

    Aliases are counted as what they expand to before anything is built: nine aliases of nine aliases...
    ("billion laughs") are a few lines that every reader of the value (validation, an error message)
    would walk for ever."""
    loader: _StrictLoader | None = None
    try:
        loader = _StrictLoader(text)  # its reader refuses characters YAML does not allow, already here
        node = loader.get_single_node()
        if node is None:
            return None
        if _expanded(node, {}, set()) > MAX_EXPANDED_NODES:
            raise error(f"{prefix}: too large: more than {MAX_EXPANDED_NODES} values once its aliases are expanded")
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        raise error(f"{prefix}: not valid YAML: {_one_line(exc)}") from None
    except RecursionError:  # PyYAML composes recursively: "[[[[..." thousands deep
        raise error(f"{prefix}: not valid YAML: nested too deeply") from None
    finally:
        if loader is not None:
            loader.dispose()


def _expanded(node: yaml.Node, sizes: dict[int, int], open_nodes: set[int]) -> int:
    """How many values ``node`` stands for with every alias expanded (each shared node counted once per use)."""
    if id(node) in sizes:
        return sizes[id(node)]
    if id(node) in open_nodes:  # an alias of an enclosing node: endless once expanded
        return MAX_EXPANDED_NODES + 1
    open_nodes.add(id(node))
    children: list[yaml.Node] = []
    if isinstance(node, yaml.SequenceNode):
        children = list(node.value)
    elif isinstance(node, yaml.MappingNode):
        children = [part for pair in node.value for part in pair]
    total = 1
    for child in children:
        total += _expanded(child, sizes, open_nodes)
        if total > MAX_EXPANDED_NODES:
            break
    open_nodes.discard(id(node))
    sizes[id(node)] = total
    return total


def _one_line(error: yaml.YAMLError) -> str:
    """PyYAML's message spans lines and names "<unicode string>"; the operator needs what and where."""
    if isinstance(error, yaml.MarkedYAMLError) and error.problem:
        mark = error.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        context = f"{error.context}: " if error.context else ""
        return f"{context}{error.problem}{where}"
    return " ".join(str(error).split())
