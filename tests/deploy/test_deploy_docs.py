"""docs/deploy.md: its YAML snippets parse, its Prometheus scrape config passes promtool, the paths it
names exist, and its systemd install puts the binary where the unit runs it."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from se_exporter import __version__
from tests.deploy.helm import Helm
from tests.deploy.support import REPO
from tests.support.readme import DOCS, code_blocks, marked
from tests.support.tools import require

pytestmark = pytest.mark.pure

DEPLOY = DOCS / "deploy.md"


def _blocks(language: str) -> list[str]:
    return code_blocks(DEPLOY.read_text(encoding="utf-8"), language)


def test_yaml_snippets_parse() -> None:
    blocks = _blocks("yaml")
    assert blocks
    for block in blocks:
        yaml.safe_load(block)


@pytest.mark.debian
def test_azure_sd_scrape_config(tmp_path: Path) -> None:
    promtool = require("promtool")
    (block,) = [b for b in _blocks("yaml") if "azure_sd_configs" in b]
    config = yaml.safe_load(block)
    (job,) = config["scrape_configs"]
    replacements = [r.get("replacement", "") for r in job["relabel_configs"] if r.get("target_label") == "__address__"]
    assert any(r.endswith(":10160") for r in replacements), "relabel the address to port 10160"
    path = tmp_path / "prometheus.yml"
    path.write_text(block, encoding="utf-8")
    result = subprocess.run([promtool, "check", "config", str(path)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_paths_mentioned_exist() -> None:
    """Repository paths the text names (deploy/…, alerts/…, dashboards/…) exist."""
    text = DEPLOY.read_text(encoding="utf-8")
    for path in sorted(set(re.findall(r"\b((?:deploy|alerts|dashboards)/[\w./-]*[\w/])", text))):
        top = path.split("/")[0]
        assert (REPO / top).exists(), top
        assert (REPO / path).exists(), f"docs/deploy.md names {path}, which does not exist"


@pytest.mark.debian
def test_the_helm_docs_push_the_image_the_install_then_pulls(helm: Helm) -> None:
    """Issue 40: docs/helm.md installed an image from a registry where nothing is published, and said
    nowhere how to build and push one. The image pushed by its build block is the one its install renders."""
    page = DOCS / "helm.md"
    build, install = marked(page, "helm-image"), marked(page, "helm-install")
    version_line = build.splitlines()[0].split("#")[0].strip()
    assert version_line.startswith("VERSION=$(")
    version = subprocess.run(
        ["bash", "-c", f"{version_line}; echo $VERSION"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.strip()
    assert version == __version__
    build = build.replace("$VERSION", version)
    (pushed,) = re.findall(r"^docker push (\S+)$", build, flags=re.M)
    assert f"docker build --build-arg VERSION={version} -t {pushed} ." in build
    sets = tuple(re.findall(r"--set (\S+)", install))
    assert sets == (f"image.repository={pushed.rsplit(':', 1)[0]}",)
    rendered = helm.template(sets=sets)
    images = [c["image"] for c in rendered.one("DaemonSet")["spec"]["template"]["spec"]["containers"]]
    assert images == [pushed]
