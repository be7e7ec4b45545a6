"""Ready for strangers: a wheel and an sdist that install cleanly, a license, one version, a changelog."""

from __future__ import annotations

import email
import json
import re
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest

import se_exporter
from tests.support.packaging import REPO, Distributions, checkout_files, install_into_clean_venv

# One worker builds the distributions once: two builds of the same tree at once share setuptools' release
# directory in it, and one removed it under the other (setuptools: "No such file or directory" for a file of tests/).
pytestmark = [pytest.mark.full, pytest.mark.xdist_group("packaging")]

DISTRIBUTION = "azure-scheduled-events-exporter"
VERSION = se_exporter.__version__


@pytest.mark.parametrize("kind", ["wheel", "sdist"])
def test_each_distribution_installs_in_a_clean_venv_and_runs(kind: str, built: Distributions, tmp_path: Path) -> None:
    script = install_into_clean_venv(getattr(built, kind), tmp_path / "venv")
    result = subprocess.run([str(script), "--version"], capture_output=True, text=True, timeout=60, check=False)
    assert (result.returncode, result.stdout) == (0, f"se-exporter {VERSION}\n"), result.stderr


def test_the_wheel_names_itself_and_its_license(built: Distributions) -> None:
    assert built.wheel.name.startswith(f"azure_scheduled_events_exporter-{VERSION}-")
    with zipfile.ZipFile(built.wheel) as wheel:
        names = wheel.namelist()
        dist_info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
        metadata = email.message_from_bytes(wheel.read(f"{dist_info}/METADATA"))
        entry_points = wheel.read(f"{dist_info}/entry_points.txt").decode()
    assert (metadata["Name"], metadata["Version"]) == (DISTRIBUTION, VERSION)
    assert metadata["License-Expression"] == "Apache-2.0"
    assert metadata.get_all("License-File") == ["LICENSE"]
    assert f"{dist_info}/licenses/LICENSE" in names
    assert "se-exporter = se_exporter.cli:main" in entry_points
    assert str(metadata.get_payload()).startswith("# se-exporter"), "the README is the long description"


def test_the_sdist_carries_the_license_and_the_docs(built: Distributions) -> None:
    with tarfile.open(built.sdist) as sdist:
        names = {name.split("/", 1)[1] for name in sdist.getnames() if "/" in name}
    assert {"LICENSE", "README.md", "pyproject.toml", "se_exporter/__init__.py"} <= names


def test_license_is_the_apache_2_text_pyproject_declares() -> None:
    text = (REPO / "LICENSE").read_text(encoding="utf-8")
    assert text.lstrip().startswith("Apache License\n                           Version 2.0, January 2004")
    assert "END OF TERMS AND CONDITIONS" in text and len(text.splitlines()) > 190
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert (project["name"], project["license"], project["license-files"]) == (DISTRIBUTION, "Apache-2.0", ["LICENSE"])


def tracked_text_files() -> list[Path]:
    # go.sum: the test programs' modules, third parties' versions (tests/collector/, tests/exporter_toolkit/)
    return [p for p in checkout_files() if p.suffix not in {".png", ".whl", ".gz"} and p.name != "go.sum"]


def test_the_version_is_written_once() -> None:
    """se_exporter/__init__.py holds it; pyproject.toml reads it; the changelog names versions by nature; the
    chart's Chart.yaml is a generated copy."""
    literal = re.compile(rf"(?<![\d.]){re.escape(VERSION)}(?![\d.])")
    written = sorted(
        str(p.relative_to(REPO))
        for p in tracked_text_files()
        if literal.search(p.read_text(encoding="utf-8", errors="replace"))
    )
    generated = "deploy/helm/se-exporter/Chart.yaml"  # written from it by dashboards/generate.py (checked in sync)
    assert written == ["CHANGELOG.md", generated, "se_exporter/__init__.py"], written
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    assert pyproject["project"]["dynamic"] == ["version"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "se_exporter.__version__"}


def test_the_changelog_keeps_a_changelog_and_leads_with_this_version() -> None:
    text = (REPO / "CHANGELOG.md").read_text(encoding="utf-8")
    headings = re.findall(r"^## \[(\d+\.\d+\.\d+)\] - (Unreleased|\d{4}-\d{2}-\d{2})$", text, flags=re.M)
    assert headings and headings[0][0] == VERSION, "the newest section is the version in se_exporter/__init__.py"
    assert ("0.1.0", "2026-11-22") in headings
    assert "keepachangelog.com" in text
    for version, _ in headings:
        assert re.search(
            rf"^## \[{re.escape(version)}\] - .*\n\n(### (Added|Changed|Fixed|Removed|Deprecated|"
            rf"Security|Performance)|\w)",
            text,
            flags=re.M,
        ), version


def _install_plan(requirement: str, report: Path) -> set[str]:
    """The distributions pip would install for ``requirement`` into an empty environment (nothing is installed)."""
    command = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet", "--report"]
    result = subprocess.run([*command, str(report), requirement], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return {item["metadata"]["name"].lower().replace("_", "-") for item in json.loads(report.read_text())["install"]}


def test_a_plain_install_brings_no_grpc_and_the_grpc_extra_does(built: Distributions, tmp_path: Path) -> None:
    """Issue 56: the OTLP meta-package brought grpcio (10 MB) to every install; gRPC is the [grpc] extra now."""
    plain = _install_plan(str(built.wheel), tmp_path / "plain.json")
    assert "opentelemetry-exporter-otlp-proto-http" in plain
    assert not {"grpcio", "opentelemetry-exporter-otlp-proto-grpc", "opentelemetry-exporter-otlp"} & plain
    with_grpc = _install_plan(f"{built.wheel}[grpc]", tmp_path / "grpc.json")
    assert {"grpcio", "opentelemetry-exporter-otlp-proto-grpc"} <= with_grpc
