"""Rules that hold where every cluster's series meet (issue 48; docs/scale.md): a central engine fed by each
cluster's remote_write, every series carrying its ``cluster``. No rule may merge two clusters: every
aggregation keeps ``cluster`` (``without`` keeps it; a ``by`` names it; a bare aggregation drops it), and every
join matches on it, since two clusters may have the same job and instance (pod IPs of the same range).
``absent()`` is the one rule of the whole view; AzureScheduledEventsExporterAbsentInCluster says it per cluster.
alerts/tests/exporter.test.yml holds both with promtool; tests/e2e/test_remote_write.py on VictoriaMetrics.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from .promql import REPO_ROOT

pytestmark = pytest.mark.pure

AGGREGATORS = r"(?:sum|count|max|min|avg|group|topk|bottomk|quantile|stddev|stdvar|count_values)"
RULES = [
    rule
    for name in ("se-exporter.rules.yml", "aks.rules.yml")
    for group in yaml.safe_load((REPO_ROOT / "alerts" / name).read_text(encoding="utf-8"))["groups"]
    for rule in group["rules"]
]


def _name(rule: dict[str, Any]) -> str:
    return str(rule.get("alert") or rule.get("record"))


def _code(expr: str) -> str:
    return re.sub(r"#[^\n]*", "", expr)  # comments say "on (" too


@pytest.mark.parametrize("rule", RULES, ids=[_name(rule) for rule in RULES])
def test_no_rule_merges_clusters(rule: dict[str, Any]) -> None:
    code = _code(rule["expr"])
    for clause in re.findall(r"\b(?:by|on)\s*\(([^)]*)\)", code):
        assert "cluster" in {label.strip() for label in clause.split(",")}, f"{_name(rule)}: ({clause}) merges clusters"
    bare = re.findall(rf"\b{AGGREGATORS}\s*\(", code)
    assert not bare, f"{_name(rule)}: an aggregation without by or without drops cluster: {bare}"


def test_absence_is_said_for_the_whole_view_once_and_per_cluster() -> None:
    absent = {_name(rule): rule["expr"] for rule in RULES if "absent(" in rule["expr"]}
    assert list(absent) == ["AzureScheduledEventsExporterAbsent"]
    by_name = {_name(rule): rule for rule in RULES}
    per_cluster = by_name["AzureScheduledEventsExporterAbsentInCluster"]["expr"]
    assert "cluster_job:azure_scheduled_events_exporter_up:count" in per_cluster
    assert by_name["cluster_job:azure_scheduled_events_exporter_up:count"]["expr"] == (
        "count by (cluster, job) (instance:azure_scheduled_events_exporter_up:max)"
    )


def test_docs_scale_is_linked_from_the_readme_and_states_the_label_contract() -> None:
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    assert "(docs/scale.md)" in readme
    scale = (REPO_ROOT / "docs" / "scale.md").read_text(encoding="utf-8")
    contract = scale[scale.index("### The label contract") :]
    for label in ("cluster", "job", "instance", "node"):
        assert f"| `{label}` |" in contract, label
    for name in ("AzureScheduledEventsExporterAbsentInCluster", "cluster_job:azure_scheduled_events_exporter_up:count"):
        assert name in scale and any(_name(rule) == name for rule in RULES), name
