"""Every file, module, class member and function the docs name exists (a renamed file fails here).

The docs are the pages a reader follows: README, SECURITY, BENCHMARKS, docs/, and the READMEs next to
the files they describe. CHANGELOG is history: it names what existed then, and is left out.
"""

from __future__ import annotations

import ast
import fnmatch
import importlib.util
import posixpath
import re
from functools import cache
from pathlib import Path

import pytest

from tests.support.readme import REPO

pytestmark = pytest.mark.pure

SKIPPED_DIRS = {".git", ".venv", "venv", "build", "dist", "node_modules", "__pycache__", ".mypy_cache", ".ruff_cache"}
SKIPPED_DIRS |= {".cache"}  # what a test run writes (git-ignored): a fresh checkout has none of it
CODE_DIRS = ("se_exporter", "tests", "benchmarks", "dashboards")
FILE = re.compile(r"^[\w.*…/-]+\.(?:py|md|ya?ml|json|toml|txt|service|xml|prom|tgz|sh)$|^[\w.-]+(?:/[\w.*-]+)*/$")
MEMBER = re.compile(r"^([A-Z]\w+)\.(\w+)(?:\(.*\))?$")
MODULE = re.compile(r"^se_exporter(?:\.\w+)+$")
CALL = re.compile(r"^([a-z_]\w*)\(.*\)$")
# Calls the docs name that are not ours: the standard library, client_python, PromQL, the OS.
OUTSIDE_CALLS = {"collect", "generate_latest", "increase", "restricted_registry", "select", "stop", "wait4", "write"}
RELEASE_WORKFLOW = REPO / ".github" / "workflows" / "release.yml"
ABSOLUTE_OUTSIDE = ("/var/", "/etc/", "/usr/", "/run/", "/tmp/", "/proc/", "/sys/", "/dev/", "/home/", "/opt/")


def _skipped(path: Path) -> bool:
    return any(part in SKIPPED_DIRS or part.endswith(".egg-info") for part in path.relative_to(REPO).parts)


PAGES = sorted(
    {REPO / "README.md", REPO / "SECURITY.md", REPO / "BENCHMARKS.md", *(REPO / "docs").glob("*.md")}
    | {page for page in REPO.glob("*/**/README.md") if not _skipped(page)}
)


@cache
def repo_paths() -> frozenset[str]:
    """Every file and directory of the checkout, relative, directories with a trailing slash."""
    found = set()
    for path in REPO.rglob("*"):
        if not _skipped(path):
            relative = path.relative_to(REPO).as_posix()
            found.add(relative + "/" if path.is_dir() else relative)
    return frozenset(found)


@cache
def definitions() -> dict[str, frozenset[str]]:
    """Each class of our code and the names defined in its body; ``""`` holds every function name."""
    found: dict[str, set[str]] = {"": set()}
    for folder in CODE_DIRS:
        for path in (REPO / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
                if isinstance(node, ast.ClassDef):
                    names = found.setdefault(node.name, set())
                    for item in node.body:
                        if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                            names.add(item.name)
                        elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                            names.add(item.target.id)
                        elif isinstance(item, ast.Assign):
                            names.update(t.id for t in item.targets if isinstance(t, ast.Name))
                elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    found[""].add(node.name)
    return {name: frozenset(names) for name, names in found.items()}


def named(page: Path) -> list[str]:
    """The code spans of a page (inline backticks), outside fenced blocks."""
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
    return [span.strip() for span in re.findall(r"`([^`\n]+)`", text)]


def file_exists(name: str, page: Path) -> bool:
    """A path from the repository root or the page's folder, or a bare file name found anywhere."""
    pattern = name.replace("…", "*")
    here = page.parent.relative_to(REPO).as_posix()
    candidates = {posixpath.normpath(posixpath.join(here, pattern)) + ("/" if pattern.endswith("/") else "")}
    candidates.add(pattern.removeprefix("./"))
    if "/" not in name and name in RELEASE_WORKFLOW.read_text(encoding="utf-8"):
        return True  # a release asset, made by the release workflow
    paths = repo_paths()
    if any(fnmatch.filter(paths, candidate) for candidate in candidates):
        return True
    return any(fnmatch.fnmatch(path, "*/" + pattern) for path in paths)  # a bare name, or a path in its folder


def missing_on(page: Path) -> list[str]:
    missing = []
    for name in named(page):
        if name.startswith(ABSOLUTE_OUTSIDE) or "://" in name or " " in name or name.startswith(".cache/"):
            continue
        if FILE.match(name):
            if not file_exists(name, page):
                missing.append(f"file {name}")
        elif MODULE.match(name):
            if not _module_or_logger(name):
                missing.append(f"module {name}")
        elif member := MEMBER.match(name):
            cls, attribute = member.groups()
            members = definitions().get(cls)
            if members is not None and attribute not in members:
                missing.append(f"{cls}.{attribute}")
        elif call := CALL.match(name):
            function = call.group(1)
            if function not in OUTSIDE_CALLS and function not in definitions()[""] and "." not in function:
                missing.append(f"function {function}()")
    return missing


@cache
def _loggers() -> frozenset[str]:
    text = "\n".join(path.read_text(encoding="utf-8") for path in (REPO / "se_exporter").rglob("*.py"))
    return frozenset(re.findall(r'getLogger\("([\w.]+)"\)', text))


def _module_or_logger(name: str) -> bool:
    return name in _loggers() or importlib.util.find_spec(name) is not None


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.relative_to(REPO).as_posix())
def test_every_file_and_function_a_page_names_exists(page: Path) -> None:
    assert missing_on(page) == []


def test_the_check_sees_a_stale_name(tmp_path: Path) -> None:
    page = REPO / "docs" / "stale-example.md"  # never written: only its folder matters
    assert file_exists("se_exporter/poller/loop.py", page) and file_exists("loop.py", page)
    assert file_exists("../alerts/se-exporter.rules.yml", page) and file_exists("tests/test_*.py", page)
    assert not file_exists("se_exporter/web.py", page) and not file_exists("imds_client.py", page)
    assert "IMDSClient" in definitions() and "get_document" in definitions()["IMDSClient"]
    assert not _module_or_logger("se_exporter.telemetry") and _module_or_logger("se_exporter.events")


def test_every_module_path_a_docstring_or_comment_names_exists() -> None:
    """A module path named in the package's own words (``web/tls.py``, ``se_exporter/imds/client.py``)
    is a module that exists: a file merged or renamed leaves no docstring pointing at nothing."""
    package = REPO / "se_exporter"
    missing = []
    for source in sorted(package.rglob("*.py")):
        for name in set(re.findall(r"(?<![\w/.])((?:[a-z_]+/)+[a-z_]+\.py)\b", source.read_text(encoding="utf-8"))):
            roots = (REPO, package, package / "simulator", source.parent)
            if not any((root / name).is_file() for root in roots):
                missing.append(f"{source.relative_to(REPO)}: {name}")
    assert not missing, missing
