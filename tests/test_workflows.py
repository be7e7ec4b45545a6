"""The upstream CI and release workflows cannot run here: they parse, and they call the same commands,
names and versions the README and the repository use."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from tests.support.readme import README, REPO, marked

pytestmark = pytest.mark.pure

WORKFLOWS = REPO / ".github" / "workflows"
IMAGE = "ghcr.io/se-exporter/azure-scheduled-events-exporter"


def workflow(name: str) -> dict[str, Any]:
    data = yaml.safe_load((WORKFLOWS / name).read_text(encoding="utf-8"))
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads the key `on` as true
    return data  # type: ignore[no-any-return]


def runs(job: dict[str, Any]) -> list[str]:
    return [step["run"] for step in job["steps"] if "run" in step]


def uses(job: dict[str, Any]) -> list[str]:
    return [step["uses"] for step in job["steps"] if "uses" in step]


def test_ci_runs_the_readmes_test_command_on_a_clean_debian() -> None:
    ci = workflow("ci.yml")
    assert set(ci["on"]) == {"push", "pull_request", "workflow_call"}  # workflow_call: the release's
    linux = ci["jobs"]["linux"]
    assert linux["container"]["image"].startswith("debian:") and linux["timeout-minutes"] <= 90
    assert "--privileged" in linux["container"]["options"], "the tmpfs (full disk) tests mount file systems"
    assert runs(linux)[-1] == "bash .ci/run"
    ci_run = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert "test-command" in ci_run and "README.md" in ci_run, ".ci/run reads the README's command"
    assert marked(README, "test-command").strip().endswith(".venv/bin/python -m pytest --full --durations=30")


def test_ci_runs_the_unit_tests_on_windows_and_macos() -> None:
    unit = workflow("ci.yml")["jobs"]["unit"]
    assert set(unit["strategy"]["matrix"]["os"]) == {"windows-latest", "macos-latest"}
    install, test = runs(unit)
    readme_install = re.search(r"uv sync --locked --inexact --all-extras", marked(README, "test-command"))
    assert readme_install and f"{readme_install.group(0)}" in install and "--require-hashes -r .ci/uv.txt" in install
    assert test == 'uv run --no-sync python -m pytest -m "not debian and not posix"'
    pyproject = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    assert '"debian: ' in pyproject and '"posix: ' in pyproject, "the markers the job deselects are declared"


def test_ci_tests_the_floors_pyproject_states() -> None:
    floors = workflow("ci.yml")["jobs"]["floors"]
    assert runs(floors)[-1] == "UV=uv bash .ci/floors"
    script = (REPO / ".ci" / "floors").read_text(encoding="utf-8")
    assert "--resolution lowest-direct" in script and "--python-version 3.11" in script


def test_release_builds_publishes_and_pushes_the_version_it_was_tagged_with() -> None:
    release = workflow("release.yml")
    assert release["on"] == {"push": {"tags": ["v*"]}}
    # Issue 56: nothing is released from a commit whose CI has not passed.
    assert release["jobs"]["ci"] == {"uses": "./.github/workflows/ci.yml"}
    publishing = [name for name, job in release["jobs"].items() if name not in ("ci", "version")]
    assert publishing and all("ci" in release["jobs"][name]["needs"] for name in publishing)
    assert release["env"]["IMAGE"] == IMAGE
    version_step = "\n".join(runs(release["jobs"]["version"]))
    assert "se_exporter.__version__" in version_step and '"v$version" = "$GITHUB_REF_NAME"' in version_step
    assert "CHANGELOG.md" in version_step
    dist = release["jobs"]["dist"]
    assert "pypa/gh-action-pypi-publish@release/v1" in uses(dist)
    # Issue 56: the distributions are built by the lock's build and setuptools, by their hashes.
    assert runs(dist)[0].splitlines() == [
        "python -m pip install --require-hashes --no-deps -r .ci/uv.txt",
        "uv export --frozen --only-group build --no-emit-project --format requirements-txt"
        " --output-file /tmp/build.txt",
        "python -m pip install --require-hashes --no-deps -r /tmp/build.txt",
        "python -m build --no-isolation",
    ]
    render = "\n".join(runs(dist))
    kustomization = yaml.safe_load((REPO / "deploy" / "kubernetes" / "kustomization.yaml").read_text(encoding="utf-8"))
    (image,) = kustomization["images"]
    assert image["newName"] == IMAGE and f'set image "{image["name"]}=$IMAGE:' in render
    push = next(step for step in release["jobs"]["image"]["steps"] if "build-push-action" in step.get("uses", ""))
    assert push["with"]["platforms"] == "linux/amd64,linux/arm64"
    assert "VERSION=${{ needs.version.outputs.version }}" in push["with"]["build-args"]
    assert "${{ env.IMAGE }}:${{ needs.version.outputs.version }}" in push["with"]["tags"]


def test_the_dockerfile_takes_the_version_the_release_passes() -> None:
    assert "ARG VERSION=" in (REPO / "Dockerfile").read_text(encoding="utf-8")
