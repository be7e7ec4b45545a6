"""Static checks of alerts/: rule conventions, runbook anchors, test coverage, metric names."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from se_exporter.durable.opening import open_memory_database
from se_exporter.imds.document import Document, ScheduledEvent, VMIdentity
from se_exporter.lifecycle import EventStore
from se_exporter.metrics.counters import Counters
from se_exporter.poller import PollResult, PollStatus
from tests.support.exposition import render
from tests.support.state_file import audit_spool

from .promql import (
    DESIGN_METRICS,
    PROMETHEUS_METRICS,
    REPO_ROOT,
    SPOOL_METRICS,
    design_md_metrics,
    exposed_names,
    github_anchor,
    metric_names,
)

pytestmark = pytest.mark.pure

ALERTS = REPO_ROOT / "alerts"
RUNBOOK = ALERTS / "runbook.md"
RUNBOOK_URL = "https://github.com/se-exporter/se-exporter/blob/main/alerts/runbook.md#"
SEVERITIES = {"critical", "warning", "info"}


def _rules() -> list[dict[str, Any]]:
    """Every rule we ship: the main file and the optional AKS group (alerts/aks.rules.yml)."""
    docs = [
        yaml.safe_load((ALERTS / name).read_text(encoding="utf-8"))
        for name in ("se-exporter.rules.yml", "aks.rules.yml")
    ]
    return [rule for doc in docs for group in doc["groups"] for rule in group["rules"]]


RULES = _rules()
ALERT_RULES = [r for r in RULES if "alert" in r]
RECORDING_RULES = [r for r in RULES if "record" in r]
ALERT_NAMES = [r["alert"] for r in ALERT_RULES]


# kube-state-metrics' series of the optional AKS group (alerts/aks.rules.yml): a node's cordon, joined with
# ours by node, and the exporter DaemonSet's desired and ready pods.
KUBE_STATE_METRICS = {
    "kube_node_spec_unschedulable",
    "kube_daemonset_status_desired_number_scheduled",
    "kube_daemonset_status_number_ready",
}
# Alerts about many machines at once: they name the job (or the DaemonSet), not an instance.
FLEET_ALERTS = {
    "AzureScheduledEventsMaintenanceWave": "$labels.job",
    "AzureScheduledEventsExporterMissingOnNodes": "$labels.daemonset",
    "AzureScheduledEventsExporterAbsentInCluster": "$labels.cluster",
}


def allowed_names() -> set[str]:
    return (
        exposed_names(DESIGN_METRICS)
        | exposed_names(SPOOL_METRICS)
        | set(PROMETHEUS_METRICS)
        | {r["record"] for r in RECORDING_RULES}
        | KUBE_STATE_METRICS
    )


def test_required_alerts_exist() -> None:
    assert len(ALERT_NAMES) == len(set(ALERT_NAMES)), "duplicate alert names"
    for name in [
        "AzureScheduledEventImpactfulScheduled",
        "AzureScheduledEventNotBeforeImminent",
        "AzureScheduledEventStarted",
        "AzureScheduledEventStartedTooLong",
        "AzureScheduledEventLongNoticeRedeploy",
        "AzureScheduledEventsIMDSDown",
        "AzureScheduledEventsIMDSPollErrors",
        "AzureScheduledEventsExporterDown",
        "AzureScheduledEventsExporterAbsent",
        "AzureScheduledEventsExporterStale",
        "AzureScheduledEventsApprovalFailed",
        "AzureScheduledEventsLogSpoolDropping",
    ]:
        assert name in ALERT_NAMES


@pytest.mark.parametrize("rule", ALERT_RULES, ids=ALERT_NAMES)
def test_alert_conventions(rule: dict[str, Any]) -> None:
    name = rule["alert"]
    assert re.fullmatch(r"AzureScheduledEvents?[A-Z][A-Za-z]+", name), "mixin-style CamelCase name"
    assert re.fullmatch(r"\d+[smh]", str(rule.get("for", ""))), "every alert states its `for`"
    assert rule.get("labels", {}).get("severity") in SEVERITIES
    annotations = rule.get("annotations", {})
    assert set(annotations) >= {"summary", "description", "runbook_url"}
    assert annotations["summary"] and "{{" not in annotations["summary"], "summary: short and static"
    description = annotations["description"]
    if name in FLEET_ALERTS:
        assert FLEET_ALERTS[name] in description, "description names the fleet it speaks of"
    elif "absent(" not in rule["expr"]:
        assert "$labels.instance" in description, "description names the instance"
    if re.match(r"AzureScheduledEvent[A-Z]", name):  # event-level alerts (exporter-level: ...Events...)
        assert "$labels.event_type" in description and "$labels.event_id" in description
    if "$value" in description:
        assert re.search(r"\$value \| humanize", description) or "{{ $value }}" in description
    assert annotations["runbook_url"] == RUNBOOK_URL + github_anchor(name)


def test_alert_values_are_humanized_where_meaningful() -> None:
    with_value = [r["alert"] for r in ALERT_RULES if "$value |" in r["annotations"]["description"]]
    assert len(with_value) >= 8, with_value


def test_runbook_has_a_section_per_alert_and_no_orphans() -> None:
    headings = re.findall(r"^#{1,6} +(.+?)\s*$", RUNBOOK.read_text(encoding="utf-8"), flags=re.M)
    anchors = {github_anchor(h) for h in headings}
    for rule in ALERT_RULES:
        anchor = rule["annotations"]["runbook_url"].split("#", 1)[1]
        assert anchor in anchors, f"runbook.md has no heading for #{anchor}"
        assert f"## {rule['alert']}" in RUNBOOK.read_text(encoding="utf-8")
    alert_like = {h for h in headings if re.fullmatch(r"AzureScheduledEvents?\w+", h)}
    assert alert_like == set(ALERT_NAMES), "runbook sections without an alert (or the reverse)"


def test_runbook_internal_links_resolve() -> None:
    text = RUNBOOK.read_text(encoding="utf-8")
    anchors = {github_anchor(h) for h in re.findall(r"^#{1,6} +(.+?)\s*$", text, flags=re.M)}
    for target in re.findall(r"\]\(#([^)]+)\)", text):
        assert target in anchors, f"broken link #{target}"


def test_runbook_shows_how_to_check_and_approve() -> None:
    text = RUNBOOK.read_text(encoding="utf-8")
    assert (
        "curl -s -H Metadata:true --noproxy '*' "
        '"http://169.254.169.254/metadata/scheduledevents?api-version=2020-07-01"' in text.replace("\\\n  ", "")
    )
    assert '{"StartRequests":[{"EventId":"<EventId>"}]}' in text
    assert "az vm redeploy" in text


def test_recording_rule_names() -> None:
    assert RECORDING_RULES
    for rule in RECORDING_RULES:
        level, metric, operation = rule["record"].split(":")
        assert level.startswith(("instance", "job", "cluster_job")), rule["record"]
        assert metric.startswith("azure_scheduled_events_"), rule["record"]
        assert operation, rule["record"]


def test_recording_rules_are_used() -> None:
    """By an alert, another rule or a dashboard panel (the fleet overview reads job-level aggregates)."""
    from tests.rules.dashboard_queries import dashboard_queries

    exprs = [r["expr"] for r in ALERT_RULES] + [r["expr"] for r in RECORDING_RULES]
    exprs += [q.raw_expr for q in dashboard_queries()]
    for rule in RECORDING_RULES:
        uses = sum(rule["record"] in metric_names(e) for e in exprs)
        assert uses >= 1, f"{rule['record']} is recorded but never used"


def test_job_selector_is_in_one_place() -> None:
    """Only the up recording rule selects a job; everything else relies on the metric prefix."""
    with_job = [r.get("record") or r.get("alert") for r in RULES if re.search(r"\bjob\s*=", r["expr"])]
    assert with_job == ["instance:azure_scheduled_events_exporter_up:max"], with_job
    with_up = [r.get("record") or r.get("alert") for r in RULES if "up" in metric_names(r["expr"])]
    assert with_up == ["instance:azure_scheduled_events_exporter_up:max"], with_up


@pytest.mark.parametrize("rule", RULES, ids=[r.get("alert") or r.get("record") for r in RULES])
def test_rules_use_only_contract_metric_names(rule: dict[str, Any]) -> None:
    unknown = metric_names(rule["expr"]) - allowed_names()
    assert not unknown, f"not in docs/design.md, the spool metrics or the recording rules: {sorted(unknown)}"


def test_metric_name_extraction() -> None:
    expr = (
        'sum by (job, instance) (rate(a_total{x="y{z}"}[5m])) / on (job) group_left (l) b:c:d '
        "> bool 0.5 and max by (le) (histogram_quantile(0.9, c_bucket offset 15m)) or vector(0) # d_e"
    )
    assert metric_names(expr) == {"a_total", "b:c:d", "c_bucket"}


def test_the_exporter_exposes_exactly_the_documented_metrics() -> None:
    """docs/design.md's table against a real exposition: approval and actions on, a spool, every kind of event
    state."""
    counters = Counters(approval_enabled=True, actions={"notify": ("scheduled",)}, written_files=("state", "spool"))
    store = EventStore()
    soon = datetime(2030, 1, 1, tzinfo=UTC)
    polls = [
        Document(
            1, (ScheduledEvent("R", "Reboot", "Started"), ScheduledEvent("S", "Freeze", "Scheduled", not_before=soon))
        ),
        Document(
            2, (ScheduledEvent("S", "Freeze", "Scheduled", not_before=soon), ScheduledEvent("T", "Redeploy", "Started"))
        ),  # R completed, T first seen Started
    ]
    for now, document in enumerate(polls, start=1_000_000_000):
        counters.on_poll(PollResult(document, store.reconcile(document, now), (), True, VMIdentity(), now))
    counters.observe_response("GET", "200", 0.01)
    approvals = SimpleNamespace(approved={"S": 1e9})  # the Approver's snapshot: S approved, still Scheduled
    web_config = SimpleNamespace(reload_successful=True)  # --web.config.file given
    status = PollStatus(up=True, last_success=1e9, api_version="2020-07-01")
    text = render(
        store, counters, status, spool=audit_spool(open_memory_database()), approvals=approvals, web_config=web_config
    )
    exposed = {
        family.name + ("_total" if family.type == "counter" else ""): family.type
        for family in text_string_to_metric_families(text)
    }
    assert exposed == design_md_metrics()


def _unit_test_cases() -> list[tuple[str, bool]]:
    cases = []
    for path in sorted(ALERTS.glob("tests/*.yml")):
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        for group in doc["tests"]:
            assert "interval" in group, f"{path.name}: promtool 2.42 needs interval in every group"
            for case in group.get("alert_rule_test", []):
                cases.append((case["alertname"], bool(case.get("exp_alerts"))))
    return cases


@pytest.mark.parametrize("name", ALERT_NAMES)
def test_every_alert_has_positive_and_negative_unit_tests(name: str) -> None:
    cases = _unit_test_cases()
    assert (name, True) in cases, f"no promtool test where {name} fires"
    assert (name, False) in cases, f"no promtool test where {name} stays quiet"


def test_unit_tests_avoid_newer_promtool_syntax() -> None:
    for path in ALERTS.glob("tests/*.yml"):
        assert not re.search(r"^\s*fuzzy_compare\s*:", path.read_text(encoding="utf-8"), flags=re.M), path.name


# Other projects' node-down alerts the shipped inhibit rules silence during maintenance: kube-prometheus
# (KubeNodeNotReady, KubeNodeUnreachable, KubeletDown), and the usual names of node_exporter's up == 0 alert.
NODE_DOWN_ALERTS = {
    "KubeNodeNotReady",
    "KubeNodeUnreachable",
    "KubeletDown",
    "NodeDown",
    "InstanceDown",
    "HostDown",
    "NodeExporterDown",
}


def test_alertmanager_example_matches_the_rules() -> None:
    config = yaml.safe_load((ALERTS / "alertmanager.yml").read_text(encoding="utf-8"))
    # A wave is one notification: never grouped by instance (issue 40: 200 VMs made 200 pages).
    assert config["route"]["group_by"] == ["alertname", "job", "impact", "cluster"]
    assert not [route for route in config["route"]["routes"] if "group_by" in route], "every route groups alike"
    severities = {
        m.split("=", 1)[1].strip('"'): route["receiver"]
        for route in config["route"]["routes"]
        for m in route.get("matchers", [])
        if m.startswith("severity=")
    }
    assert set(severities) == SEVERITIES
    assert severities["critical"] != severities["warning"] != severities["info"]
    assert config["inhibit_rules"]
    for rule in config["inhibit_rules"]:
        for matcher in rule["source_matchers"] + rule["target_matchers"]:
            match = re.fullmatch(r'(\w+)(=~|=)"?(.*?)"?', matcher)
            assert match, matcher
            key, _op, value = match.groups()
            if key == "alertname":
                for name in value.split("|"):
                    assert name in {*ALERT_NAMES, *NODE_DOWN_ALERTS}, f"inhibit rule names unknown alert {name}"
        if rule["source_matchers"] == ['alertname="AzureScheduledEventsMaintenanceWave"']:
            # The wave says once what its VMs' warnings would say each: the same job and cluster.
            assert rule["equal"] == ["job", "cluster"]
            assert rule["target_matchers"] == ['alertname="AzureScheduledEventImpactfulScheduled"']
            continue
        assert {"instance", "node"} & set(rule["equal"]), "a rule silences only what concerns the same machine"
        if rule["equal"] == ["node"]:  # a source without the label would silence every target without it
            assert 'node=~".+"' in rule["source_matchers"]
