"""Which tests need Debian's tools, found from what they call as well as from a list.

The ``debian`` marker deselects a test where Debian's packages cannot be (the upstream CI's Windows job and
the Windows suite under Wine, ``-m "not debian"``). A list of node ids alone was forgotten once: the issue-40
rule tests called promtool and Alertmanager, were not listed, and failed the Wine run under CI. So a test is
also marked when its own body, a helper of its module that it calls, or a fixture it uses, asks for one of
those tools by name.
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable, Iterable
from typing import Any

import pytest

# require("promtool"), require("prometheus-alertmanager", "alertmanager"), require_binary("prometheus"), ...
DEBIAN_TOOL = re.compile(
    r"""\brequire(?:_binary)?\(\s*["'](?:promtool|prometheus|prometheus-alertmanager|alertmanager|amtool|"""
    r"""systemd-analyze)["']"""
)
# Our helpers that start one of those tools for the caller: Alertmanager with a config, the helm binary.
DEBIAN_HELPERS = re.compile(r"\b(?:recipes\.)?running\(\s*tmp_path\b|\bextract_helm\(")


@functools.cache
def _source(function: Callable[..., Any]) -> str:
    try:
        return inspect.getsource(function)
    except (OSError, TypeError):  # a builtin or a generated function: nothing of ours to read
        return ""


def asks_for_debian_tools(functions: Iterable[Callable[..., Any]]) -> bool:
    """True when the source of any of ``functions`` names a Debian tool or one of our helpers that runs one."""
    return any(DEBIAN_TOOL.search(text) or DEBIAN_HELPERS.search(text) for text in map(_source, functions))


def with_module_helpers(function: Callable[..., Any]) -> list[Callable[..., Any]]:
    """``function`` and the functions of its own module that it calls by name, and that they call."""
    module = inspect.getmodule(function)
    local = {
        name: value
        for name, value in vars(module).items()
        if inspect.isfunction(value) and module is not None and value.__module__ == module.__name__
    }
    found, todo = [function], [function]
    while todo:
        text = _source(todo.pop())
        for name, helper in local.items():
            if helper not in found and re.search(rf"\b{re.escape(name)}\(", text):
                found.append(helper)
                todo.append(helper)
    return found


def test_and_fixture_functions(item: pytest.Item) -> list[Callable[..., Any]]:
    """The test's function, its module's helpers it calls, and the functions of every fixture it uses."""
    functions: list[Callable[..., Any]] = []
    if isinstance(item, pytest.Function):
        functions.extend(with_module_helpers(item.function))
        # _fixtureinfo: pytest has no public way to the fixture functions of an item; plugins read it too
        for definitions in item._fixtureinfo.name2fixturedefs.values():
            functions.extend(definition.func for definition in definitions)
    return functions


def needs_debian(item: pytest.Item, listed: tuple[str, ...]) -> bool:
    return item.nodeid.startswith(listed) or asks_for_debian_tools(test_and_fixture_functions(item))
