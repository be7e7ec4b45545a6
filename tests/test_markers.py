"""Tests that need Debian's tools are marked ``debian``: the Windows runs deselect them (tests/support/markers.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.markers import asks_for_debian_tools, with_helpers
from tests.testdata.markers import samples

pytestmark = pytest.mark.pure

REPO = Path(__file__).resolve().parents[1]
# not all of tests/deploy: test_helm_chart.py fails to import under Wine (pydantic-core's DLL)
DEPLOY_DOCS = "tests/deploy/test_deploy_docs.py"
PYTEST = (sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:cloudcoil", "-o", "addopts=")


@pytest.mark.parametrize(
    ("function", "needs"),
    [
        (samples.calls_promtool, True),
        (samples.calls_alertmanager_by_either_name, True),
        (samples.starts_alertmanager_through_the_recipes, True),
        (samples.extracts_helm, True),
        (samples.calls_a_helper_that_starts_prometheus, True),  # through a helper of its module
        (samples.calls_gcc, False),  # the README's command installs gcc on every platform's CI
        (samples.names_promtool_in_a_string_only, False),
        (samples.calls_a_helper_that_does_not, False),
    ],
)
def test_a_test_that_asks_for_a_debian_tool_is_found(function: object, needs: bool) -> None:
    assert asks_for_debian_tools(with_helpers(function)) is needs  # type: ignore[arg-type]


def test_the_windows_selection_leaves_out_the_rule_tests_that_failed_under_wine() -> None:
    """The issue-40 tests ran promtool, Prometheus and Alertmanager under Wine with CI set, and failed CI."""
    collected = subprocess.run(
        [
            *PYTEST,
            "--collect-only",
            "-q",
            "-m",
            "not debian and not posix and not shipped",
            "tests/rules",
            DEPLOY_DOCS,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    selected = set(collected.stdout.split())
    assert collected.returncode == 0 and "tests/rules/test_rules_static.py::test_required_alerts_exist" in selected
    for left_out in (
        "tests/rules/test_paging_policy.py::test_each_event_gets_the_alerts_the_paging_policy_says_and_no_more",
        "tests/rules/test_panel_queries.py::test_the_fleet_says_when_and_which_vm",
        "tests/rules/test_scrape_examples.py::test_both_jobs_name_each_vm_alike",
        "tests/rules/test_scrape_examples.py::test_a_vm_in_maintenance_silences_node_exporters_instance_down_of_that_vm",
        "tests/rules/test_alertmanager_wave.py::test_a_wave_of_200_vms_is_one_page_and_one_chat_message",
        "tests/deploy/test_deploy_docs.py::test_the_helm_docs_push_the_image_the_install_then_pulls",
    ):
        assert left_out not in selected


def test_the_shards_of_a_suite_together_select_each_test_once() -> None:
    """The Windows suite runs as shards (``--shard=I/N``, tests/shipped/test_windows_suite.py): together they
    run what one interpreter would, none twice."""

    def selected(*shard: str) -> list[str]:
        collected = subprocess.run(
            [*PYTEST, "--collect-only", "-q", *shard, "tests/test_impact.py", "tests/test_uids.py"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert collected.returncode == 0, collected.stdout + collected.stderr
        return [line for line in collected.stdout.split() if "::" in line]

    whole = selected()
    shards = [selected(f"--shard={index}/3") for index in range(3)]
    assert all(shards) and sorted(test for shard in shards for test in shard) == sorted(whole) and len(whole) > 3
