"""The package's shape (docs/architecture.md): data flows one way, so imports do too.

Every module belongs to a stage; a module may import its own stage and lower ones, never a higher
one, and no modules import each other in a loop. Imports inside functions count (a lazy import is
still a dependency); ``if TYPE_CHECKING:`` imports count for the direction but not as loops.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

pytestmark = pytest.mark.pure

PACKAGE = Path(__file__).resolve().parents[1] / "se_exporter"

# Stage of each top-level module or subpackage, lowest first (docs/architecture.md has the same table).
STAGES: dict[str, int] = {
    "__init__": 0,
    "errors": 0,
    "logs": 0,
    "common": 0,  # times, stable ids, bounded HTTP answers, send outcomes
    "platform": 0,
    "durable": 0,  # the state file: opens, migrates, reads and writes the database (no domain type)
    "imds": 1,  # IMDS client and document model
    "process": 2,  # the stop request, serve, and running an operator's command for an event
    "config": 2,  # what the operator writes: flags, options, files
    "lifecycle": 3,  # the pure state machine and its values (event states, transitions)
    "simulator": 3,  # a world of its own beside the state machine
    "approval": 4,  # decides on the listed events
    "actions": 4,  # runs the operator's commands on the transitions
    "poller": 5,  # drives IMDS → lifecycle → approver → sinks
    "metrics": 6,
    "audit": 6,
    "otel": 6,
    "web": 6,  # sinks and the HTTP side
    "app": 7,  # wiring
    "cli": 8,  # the command line: run, demo, check
    "__main__": 8,
}
SIMULATOR_MAY_USE = {"errors", "logs", "common", "platform", "process", "config", "simulator", "__init__"}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def stage_key(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def imports(path: Path) -> tuple[set[str], set[str]]:
    """(every se_exporter module imported, those imported only for type checking)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    type_only = {
        id(child)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for child in ast.walk(node)
    }
    runtime: set[str] = set()
    typing: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            targets = {
                f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in MODULES else node.module for a in node.names
            }
        else:
            continue
        (typing if id(node) in type_only else runtime).update(target for target in targets if target in MODULES)
    return runtime | typing, typing - runtime


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


@functools.cache
def graph() -> dict[str, tuple[set[str], set[str]]]:
    """Each module's imports of the package's modules (all, and those made only for typing): read when a test
    asks, not while every worker collects."""
    return {name: imports(path) for name, path in MODULES.items()}


def test_every_module_has_a_stage() -> None:
    assert {stage_key(module) for module in MODULES} <= set(STAGES), "add new top-level modules to STAGES"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_import_from_a_lower_stage_to_a_higher_one(module: str) -> None:
    stage = STAGES[stage_key(module)]
    upward = sorted(
        target
        for target in graph()[module][0]
        if stage_key(target) != stage_key(module) and STAGES[stage_key(target)] > stage
    )
    assert not upward, f"{module} (stage {stage}) imports higher stages: {upward}"


def test_the_simulator_stands_apart_from_the_exporter() -> None:
    for module, (targets, _) in graph().items():
        if stage_key(module) == "simulator":
            assert {stage_key(t) for t in targets} <= SIMULATOR_MAY_USE, module


def test_no_import_loops() -> None:
    runtime = {
        module: {t for t in targets - typing if t in MODULES and t != module}
        for module, (targets, typing) in graph().items()
    }
    loops = [cycle for cycle in _cycles(runtime) if len(cycle) > 1]
    assert not loops, f"modules importing each other: {loops}"


def test_the_architecture_page_lists_the_same_stages() -> None:
    page = (PACKAGE.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    for key in STAGES:
        name = f"{key}.py" if (PACKAGE / f"{key}.py").exists() else f"{key}/"
        if key not in ("__init__", "__main__"):
            assert f"`{name}`" in page, f"docs/architecture.md does not place {name}"


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components (Tarjan), each a loop if it has more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            found.append(component)

    for node in graph:
        if node not in index:
            visit(node)
    return found


# What the design's libraries do (DESIGN.md, The stack) is not done again here: no HTTP client or server
# of our own, no exposition writer, no event loop, no private digest modules.
_NOT_OURS = {
    "http.client": "httpx talks HTTP (IMDS, the health check); the official OTLP exporters send OTLP",
    "selectors": "asyncio runs the web server",
    "_sha1": "hashlib",
    "_sha2": "hashlib",
    "_sha256": "hashlib",
}


@pytest.mark.parametrize("module", sorted(MODULES))
def test_the_stack_does_the_protocol_work(module: str) -> None:
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    found = {name: why for name, why in _NOT_OURS.items() if name in imported}
    if stage_key(module) == "imds" and "socket" in imported:
        found["socket"] = "httpx's transport holds IMDS's connections"
    assert not found, f"{module} does what a library of the stack does: {found}"
