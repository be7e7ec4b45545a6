"""The shipped forms run for real: the image under podman, the chart's pod in it, Windows CPython under Wine.

Every test here carries the ``shipped`` marker (``-m "not shipped"`` leaves them out on a developer's
machine); the README's test command installs what they need and runs them.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest

from tests.deploy.conftest import helm  # noqa: F401 - the session's real helm, shared
from tests.shipped.containers import Podman


@pytest.fixture(scope="session")
def podman() -> Podman:
    return Podman.find()


@pytest.fixture(scope="session")
def image(podman: Podman) -> str:
    return podman.project_image()


@pytest.fixture
def container_name(podman: Podman) -> Iterator[Callable[[], str]]:
    """Names for this test's containers and volumes; all of them are removed when it ends."""
    names: list[str] = []

    def new() -> str:
        names.append(f"se-test-{uuid.uuid4().hex[:12]}")
        return names[-1]

    yield new
    for name in names:
        podman.run("rm", "--force", "--volumes", "--time", "0", name, check=False)  # and the image's anonymous volume
        podman.run("volume", "rm", "--force", name, check=False)
