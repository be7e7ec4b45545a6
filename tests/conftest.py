"""Shared fixtures: a scriptable IMDS and exporter subprocesses that are always stopped."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.exporter_process import ExporterProcess
from tests.support.fake_imds import FakeIMDS
from tests.support.packaging import Distributions, build_distributions

pytest_plugins = ["tests.otlp.fixtures"]  # the real OTLP receivers (HTTP and gRPC)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("soak", "the long soak test (tests/soak)")
    group.addoption("--soak", action="store_true", default=False, help="run the long soak (10 minutes)")
    group.addoption("--soak-minutes", type=float, default=None, help="run the long soak for this many minutes")


@pytest.fixture
def fake_imds() -> Iterator[FakeIMDS]:
    server = FakeIMDS().start()
    yield server
    server.stop()


@pytest.fixture
def start_exporter(tmp_path: Path) -> Iterator[Callable[..., ExporterProcess]]:
    started: list[ExporterProcess] = []

    def start(*args: str, env: dict[str, str] | None = None, command: str = "run") -> ExporterProcess:
        process = ExporterProcess(*args, env=env, command=command,
                                  log_path=tmp_path / f"exporter-{len(started)}.log")
        started.append(process)
        return process

    yield start
    for process in started:
        if process.proc.poll() is None:
            process.proc.kill()
            process.proc.wait(10)


@pytest.fixture(scope="session")
def built(tmp_path_factory: pytest.TempPathFactory) -> Distributions:
    """The wheel and the sdist as a release builds them (``python -m build``, isolated)."""
    return build_distributions(tmp_path_factory.mktemp("dist"))
