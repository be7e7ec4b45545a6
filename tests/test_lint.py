"""ruff (lint and format) and mypy (strict on se_exporter/, tests/, benchmarks/ and dashboards/) run with the tests."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *command], cwd=REPO, capture_output=True, text=True, timeout=600)


def test_ruff() -> None:
    result = run("ruff", "check", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format() -> None:
    """One formatting rule, ruff's (black's style at 120 columns): run ``ruff format .`` to apply it."""
    result = run("ruff", "format", "--check", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_strict() -> None:
    result = run("mypy")  # files and strictness come from pyproject.toml
    assert result.returncode == 0, result.stdout + result.stderr


def test_no_assert_guards_an_invariant_in_the_package() -> None:
    """``python -O`` drops asserts: a guard the code relies on must be a check that stays."""
    import ast

    package = Path(__file__).resolve().parents[1] / "se_exporter"
    found = [
        f"{path.relative_to(package)}:{node.lineno}"
        for path in sorted(package.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path)))
        if isinstance(node, ast.Assert)
    ]
    assert found == []
