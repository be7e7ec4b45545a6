"""Shared fixtures: a scriptable IMDS and exporter subprocesses that are always stopped."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.exporter_process import ExporterProcess
from tests.support.fake_imds import FakeIMDS
from tests.support.markers import asks_for_debian
from tests.support.packaging import Distributions, build_distributions

pytest_plugins = ["tests.otlp.fixtures"]  # the real OTLP receivers (HTTP and gRPC)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("soak", "the long soak test (tests/soak)")
    group.addoption("--soak", action="store_true", default=False, help="run the long soak (10 minutes)")
    group.addoption("--soak-minutes", type=float, default=None, help="run the long soak for this many minutes")
    tiers = parser.getgroup("tiers", "which tests plain `pytest` runs (docs/development.md)")
    tiers.addoption(
        "--full",
        action="store_true",
        default=False,
        help="every tier: engines, the image, the chart's pod, Wine (the README's test command); without it and "
        "without paths or -m, plain `pytest` runs the quick tier",
    )
    tiers.addoption(
        "--shard",
        default=None,
        metavar="I/N",
        help="run every Nth selected test from the Ith (0-based): N interpreters share a suite without xdist "
        "(tests/shipped/test_windows_suite.py runs the Windows suite so under Wine)",
    )


@pytest.fixture(autouse=True)
def _se_exporter_logger_restored() -> Iterator[None]:
    """A test that runs the command in-process (``main``) or calls ``logs.configure`` gives the se_exporter
    logger a handler of its own and stops its propagation; put it back, or caplog sees nothing in the tests
    that follow on that worker (found by the floors run, whose older xdist ordered the tests otherwise)."""
    logger = logging.getLogger("se_exporter")
    handlers, level, propagate = list(logger.handlers), logger.level, logger.propagate
    yield
    logger.handlers[:] = handlers
    logger.setLevel(level)
    logger.propagate = propagate


@pytest.fixture
def fake_imds() -> Iterator[FakeIMDS]:
    server = FakeIMDS().start()
    yield server
    server.stop()


@pytest.fixture
def start_exporter(tmp_path: Path) -> Iterator[Callable[..., ExporterProcess]]:
    started: list[ExporterProcess] = []

    def start(
        *args: str, env: dict[str, str] | None = None, command: str = "run", serve: bool = True
    ) -> ExporterProcess:
        log_path = tmp_path / f"exporter-{len(started)}.log"
        process = ExporterProcess(*args, env=env, command=command, log_path=log_path, serve=serve)
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


# Each module marks its own tests (``pytestmark``): ``debian`` (Debian's engines and tools: Prometheus,
# Alertmanager, promtool, node_exporter, VictoriaMetrics, systemd-analyze, or the Linux helm binary),
# ``posix`` (processes stopped by signals, POSIX shells and groups), ``shipped`` (the image, the chart's pod,
# Windows CPython under Wine), ``full`` (slower than the quick tier allows). Where the suite runs on other
# platforms (the upstream CI's Windows and macOS jobs, ``-m "not debian and not posix"``), a test marked so
# is also skipped with its reason. Plain ``pytest`` is the quick tier (pyproject's addopts).
WHY = {
    "debian": "needs Debian's prometheus, prometheus-alertmanager or systemd packages, or the Linux helm binary "
    "(the README's test command)",
    "posix": "needs POSIX processes and signals; the Windows side is covered by tests/test_platform.py",
}


QUICK_TIER_LEAVES_OUT = ("debian", "shipped", "full")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _check_the_debian_marks(items)
    for item in items:
        if item.get_closest_marker("debian") and sys.platform != "linux":
            item.add_marker(pytest.mark.skip(reason=WHY["debian"]))
        if item.get_closest_marker("posix") and os.name == "nt":
            item.add_marker(pytest.mark.skip(reason=WHY["posix"]))
    if getattr(config.option, "quick_tier", False):
        left_out = [item for item in items if any(item.get_closest_marker(m) for m in QUICK_TIER_LEAVES_OUT)]
        if left_out:
            config.hook.pytest_deselected(items=left_out)
            kept = set(items) - set(left_out)
            items[:] = [item for item in items if item in kept]
    if shard := config.getoption("--shard"):
        index, count = (int(part) for part in shard.split("/"))
        others = [item for position, item in enumerate(items) if position % count != index]
        if others:
            config.hook.pytest_deselected(items=others)
            items[:] = items[index::count]
    # Minutes-long tests first: xdist deals the items out in this order, so each starts on its own worker while
    # the short ones fill the others, and the run does not end waiting on one started last.
    items.sort(key=lambda item: item.get_closest_marker("long") is None)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: two workers a core. Most tests wait on processes, sockets and polls (half the CPU stood idle
    with one a core: 2 cores, 50 % idle in the full run), and none bounds wall-clock time tightly."""
    return 2 * (os.cpu_count() or 1)


def pytest_configure(config: pytest.Config) -> None:
    # xdist's workers parse the same command line as the controller, so each decides alike.
    config.option.quick_tier = _quick_tier(config)


def _quick_tier(config: pytest.Config) -> bool:
    """Plain `pytest`: no --full, no paths or node ids, no -m (a path or a -m selects what it names)."""
    named = config.args_source is not pytest.Config.ArgsSource.TESTPATHS
    return not (config.getoption("--full") or named or config.getoption("markexpr"))


def _check_the_debian_marks(items: list[pytest.Item]) -> None:
    unmarked = [item.nodeid for item in items if not item.get_closest_marker("debian") and asks_for_debian(item)]
    if unmarked:
        raise pytest.UsageError(
            "these tests ask for Debian's tools but are not marked debian (pytestmark = pytest.mark.debian):\n  "
            + "\n  ".join(unmarked)
        )
