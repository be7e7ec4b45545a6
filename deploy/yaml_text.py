"""The YAML of the rule files and of their deploy copies, one style for all: keys in the order written,
multi-line PromQL as literal blocks, no line folding."""

from __future__ import annotations

from typing import Any

import yaml


class _Dumper(yaml.SafeDumper):
    pass


def _str(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    # PyYAML falls back to a quoted style by itself where a block cannot be exact.
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style="|" if "\n" in data else None)


_Dumper.add_representer(str, _str)


def dump_yaml(data: Any) -> str:
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, width=10000, allow_unicode=True)
