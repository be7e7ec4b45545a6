"""The real helm, extracted once per session (tests/deploy/helm.py)."""

from __future__ import annotations

import pytest

from tests.deploy.helm import Helm, extract_helm


@pytest.fixture(scope="session")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Helm:
    home = tmp_path_factory.mktemp("helm")
    return Helm(extract_helm(home / "bin"), home)
