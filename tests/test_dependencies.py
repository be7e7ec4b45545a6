"""Every distribution whose modules the exporter imports is declared in pyproject.toml (issue 45), not left to
arrive with another package: an upgrade of that package may stop bringing it."""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import sys
import tomllib
from importlib.metadata import distributions
from pathlib import Path

import pytest

pytestmark = pytest.mark.pure

ROOT = Path(__file__).resolve().parents[1]


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def imported_modules() -> set[str]:
    """Absolute imports of se_exporter/, to three levels (through namespaces: google.rpc.status_pb2), and what
    ``from`` imports name (a module, or an attribute: those are skipped)."""
    found: set[str] = set()
    for path in (ROOT / "se_exporter").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            found.update(".".join(name.split(".")[:3]) for name in names)
    return {name for name in found if name.split(".")[0] not in sys.stdlib_module_names | {"se_exporter"}}


def owner_by_file() -> dict[str, str]:
    """Each installed file's distribution, by its real path (links resolved once per distribution's folder:
    resolving each of the environment's twenty thousand files took seconds)."""
    owners: dict[str, str] = {}
    for dist in distributions():
        name = canonical(dist.metadata["Name"])  # parsed from METADATA at each access: once a distribution
        folder = Path(str(dist.locate_file(""))).resolve()
        for file in dist.files or ():
            owners[os.path.normpath(folder / file)] = name
    return owners


def declared() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    requirements = [*project["dependencies"], *project["optional-dependencies"]["grpc"]]
    return {canonical(re.split(r"[\s<>=~!;\[]", requirement, maxsplit=1)[0]) for requirement in requirements}


def test_every_distribution_the_exporter_imports_from_is_declared() -> None:
    owners, wanted, missing = owner_by_file(), declared(), []
    for module in sorted(imported_modules()):
        try:
            spec = importlib.util.find_spec(module)
        except ModuleNotFoundError:  # the parent is a module, this an attribute of it
            continue
        if spec is None or spec.origin in (None, "namespace"):  # an attribute; a namespace owns nothing itself
            continue
        where = str(Path(spec.origin).resolve())
        owner = owners.get(where)
        assert owner is not None, f"no installed distribution holds {module} ({where})"
        if owner not in wanted:
            missing.append(f"{module} (from {owner})")
    assert not missing, f"imported but not declared in pyproject.toml: {', '.join(missing)}"
