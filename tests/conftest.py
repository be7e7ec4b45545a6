"""Shared fixtures: a scriptable IMDS and exporter subprocesses that are always stopped."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.exporter_process import ExporterProcess
from tests.support.fake_imds import FakeIMDS
from tests.support.markers import needs_debian
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


# Where the suite runs on other platforms (the upstream CI's Windows and macOS jobs, `-m "not debian and
# not posix"`), these are deselected, and on Windows a posix test is skipped with its reason. Node ids by
# prefix: a module, or one test of it.
NEEDS_DEBIAN = (  # promtool, prometheus, alertmanager, amtool or systemd-analyze (the README's test command)
    "tests/rules/test_promtool.py",
    "tests/e2e/",
    "tests/deploy/test_compose.py",
    "tests/deploy/test_systemd.py",
    "tests/deploy/test_kubernetes.py::test_prometheusrule_structure",
    "tests/hostile/",
    "tests/deploy/test_deploy_docs.py::test_azure_sd_scrape_config",
    "tests/test_dashboards_static.py::test_dashboard_queries_parse_with_promtool",
    "tests/test_metrics.py::test_golden_exposition_passes_promtool_check_metrics",
    "tests/integration/test_against_simulator.py",
    "tests/web/test_exporter_web_config.py",
    "tests/rules/test_alertmanager_recipes.py",
    "tests/deploy/test_helm_chart.py",  # helm: the Linux binary of the wheel the README's command installs
    "tests/deploy/test_helm_objects.py",
    "tests/shipped/",  # podman, mmdebstrap and wine
)
NEEDS_POSIX = (  # the exporter or the simulator as a process stopped by SIGTERM/SIGKILL, POSIX shells and groups
    "tests/approval/test_approval_exporter.py",
    "tests/approval/test_approval_hook.py",
    "tests/approval/test_approval_approver.py",
    "tests/approval/test_approval_policy.py::test_valid_policies_load",
    "tests/approval/test_approval_policy.py::test_all_keys_are_parsed",
    "tests/integration/",
    "tests/otel/test_export.py",
    "tests/otel/test_modes.py",
    "tests/otel/test_outage.py",
    "tests/otel/test_quiet.py",
    "tests/soak/",
    "tests/simulator/test_command.py",
    "tests/hostile/",
    "tests/e2e/",
    "tests/deploy/test_dockerfile.py",
    "tests/web/test_exporter_web_config.py",
    "tests/test_benchmarks_smoke.py",
    "tests/fuzz/test_atheris.py",
    "tests/test_cli.py::test_simulate_without_a_scenario",
    "tests/test_cli.py::test_an_unwritable_state_file",
    "tests/test_platform.py::test_serve_listens",
    "tests/actions/test_actions_exporter.py",
    "tests/approval/test_policy_cost.py",
    "tests/otel/test_batches.py",
    "tests/web/test_connection_flood.py",
    "tests/web/test_traffic.py",
    "tests/test_check.py::test_a_hook_that_is_not_executable_is_refused_as_at_start",
    "tests/shipped/",
    "tests/otel/test_impact_everywhere.py",  # stops the exporter with SIGTERM and expects a clean exit
    "tests/actions/test_actions_config.py::test_the_docs_example_loads_with_its_defaults",  # /bin/true in testdata
    "tests/actions/test_actions_config.py::test_every_key_loads",  # /bin/sh in testdata
    "tests/test_check.py::test_the_actions_file_is_checked_like_the_others",  # /bin/true in testdata
    "tests/test_check.py::test_files_are_read_with_bounds[fifo]",  # os.mkfifo
    "tests/test_check.py::test_sigterm_ends_check_at_once",  # SIGTERM, /proc
    "tests/test_check.py::test_files_are_read_with_bounds[dev-zero]",  # /dev/zero
    # -X importtime writes to the C library's stderr, buffered on Windows and lost when the test ends the
    # exporter there (TerminateProcess): what was imported last is missing
    "tests/test_imports.py::test_what_is_configured_is_imported",
    "tests/test_imports.py::test_otlp_over_http_brings_neither_requests_nor_grpc",
)
WHY = {
    "debian": "needs Debian's prometheus, prometheus-alertmanager or systemd packages, or the Linux helm binary "
    "(the README's test command)",
    "posix": "needs POSIX processes and signals; the Windows side is covered by tests/test_platform.py",
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.nodeid.startswith("tests/shipped/"):
            item.add_marker(pytest.mark.shipped)
        if needs_debian(item, NEEDS_DEBIAN):
            item.add_marker(pytest.mark.debian)
            if sys.platform != "linux":
                item.add_marker(pytest.mark.skip(reason=WHY["debian"]))
        if item.nodeid.startswith(NEEDS_POSIX):
            item.add_marker(pytest.mark.posix)
            if os.name == "nt":
                item.add_marker(pytest.mark.skip(reason=WHY["posix"]))
