"""End to end: the real exporter, against the simulator with events in every state, scraped by a real
Prometheus (Debian package) running the shipped rules, alerting a real Alertmanager routed by the
shipped example configuration to a webhook in the test.

See conftest.py for the stack and scene.py for the simulated VM. The run needs ``prometheus`` and
``prometheus-alertmanager`` (or ``alertmanager``) and ``promtool``: skipped locally when missing,
a failure when ``CI`` is set.
"""

from __future__ import annotations

import math
import re
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pytest
import yaml

from tests.e2e.processes import OVERRIDE_LABEL, require_binary
from tests.e2e.stack import JOB, RULES, Stack
from tests.rules.dashboard_queries import DashboardQuery, dashboard_queries
from tests.rules.promql import PROMETHEUS_METRICS, metric_names
from tests.support.exposition import samples, value
from tests.support.wait import wait_for

pytestmark = [pytest.mark.debian, pytest.mark.posix]

RATE_INTERVAL = "15s"  # >= 4 scrapes at 1s, as Grafana's $__rate_interval guarantees
DATA_DEADLINE = 30.0  # seconds for rate()-based panels to get their data

# Metric names the dashboards or rules use that this stack cannot make the exporter expose, with the
# reason. test_expected_absent_metrics_are_absent fails as soon as one of them appears, so the list gets
# tightened. The approval counters appear because the exporter runs with an approval policy, the log-spool
# metrics because it runs with OTLP configured (conftest.py).
EXPECTED_ABSENT: dict[str, str] = {
    "azure_scheduled_events_event_approved_timestamp_seconds": (
        "nothing is approved in the scene: its policy's hook fails, to show approval failures (an approved "
        "event's series: tests/approval/test_approval_exporter.py; the alerts on it: alerts/tests)"
    ),
    "azure_scheduled_events_web_config_last_reload_successful": (
        "the scene's exporter runs without --web.config.file (the gauge with one: tests/web/test_live_config.py "
        "and tests/web/test_exporter_web_config.py)"
    ),
}


# ----- what each dashboard panel should show --------------------------------------------------------


@dataclass(frozen=True)
class Expect:
    """A check on what a query returns: ``values`` are all its points (for a range panel: every point of
    every series), ``n`` its number of series (for a range panel: those with a point at the range's end,
    i.e. what the panel shows now; the range also holds the history events)."""

    what: str
    check: Callable[[list[float], int], bool]  # (values, number of series) -> ok


DATA = Expect("data", lambda values, n: len(values) > 0)
EMPTY = Expect("no data", lambda values, n: len(values) == 0)
NONZERO = Expect("a value > 0", lambda values, n: any(v > 0 for v in values))
FINITE = Expect("a finite value", lambda values, n: any(math.isfinite(v) for v in values))


def equals(expected: float) -> Expect:
    return Expect(f"exactly {expected}", lambda values, n: n > 0 and all(v == expected for v in values))


def between(low: float, high: float) -> Expect:
    return Expect(f"values in [{low}, {high}]", lambda values, n: n > 0 and all(low <= v <= high for v in values))


def series_count(expected: int) -> Expect:
    return Expect(f"{expected} series", lambda values, n: n == expected)


FLEET, VM = "fleet-overview.json", "vm-detail.json"


def panel_expectations(stack: Stack) -> dict[tuple[str, str, str], Expect]:
    """(dashboard file, panel title, refId) -> what it must show, given the scene (scene.py)."""
    listed = len(stack.scene.listed)
    started = sum(1 for s in stack.scene.listed.values() if s == "Started")
    timed = sum(1 for s in stack.scene.listed.values() if s == "Scheduled")  # those with a NotBefore
    return {
        (FLEET, "variable job", "variable"): DATA,
        (FLEET, "variable instance", "variable"): DATA,
        (FLEET, "VMs with impactful events", "A"): equals(1),
        (FLEET, "Events in progress", "A"): equals(started),
        (FLEET, "Spot VMs at eviction risk", "A"): equals(1),  # the scene's eviction-risk notice
        (FLEET, "Soonest NotBefore", "A"): between(0, 240),  # the imminent Reboot: 240 s notice
        (FLEET, "Exporters down", "A"): equals(0),
        (FLEET, "IMDS failing", "A"): equals(0),
        (FLEET, "Oldest successful poll", "A"): between(0, 5),
        # This VM's events by impact: reboot, redeploy, eviction and pause (the Terminate is another VM's).
        (FLEET, "Upcoming impact by kind", "A"): series_count(5),
        # The fleet's "which VM" panels leave out the other VM's Terminate (affects_this_vm="false").
        (FLEET, "Current events", "A"): series_count(listed - 1),
        (FLEET, "Current events", "B"): series_count(timed - 1),  # NotBefore, a clock time
        (FLEET, "Current events", "C"): series_count(timed - 1),  # Started and Advisory events have no NotBefore
        (FLEET, "Current events", "D"): series_count(started),
        (FLEET, "Current events", "E"): series_count(listed - 1),
        (FLEET, "Current events", "F"): EMPTY,  # approved at: nothing approved (EXPECTED_ABSENT)
        (FLEET, "VMs with pending events by type and status", "A"): DATA,
        (FLEET, "Distinct events by type and status", "A"): DATA,
        (FLEET, "Event timeline", "A"): series_count(listed - 1),
        (FLEET, "Transitions", "A"): NONZERO,
        (FLEET, "Approvals by result", "A"): DATA,  # zero series: the exporter runs with an approval policy
        (FLEET, "Approval failures (time range)", "A"): NONZERO,  # the User Reboot's hook fails (scene.py)
        (FLEET, "Actions by result", "A"): NONZERO,  # the stack's action runs on every scheduled transition
        (FLEET, "Exporters with IMDS down", "A"): equals(0),
        (FLEET, "Exporters with IMDS down", "B"): equals(1),
        (FLEET, "Poll errors by reason", "A"): DATA,  # zero series for every reason
        (FLEET, "IMDS requests by code", "A"): NONZERO,
        (FLEET, "Time since last successful poll", "A"): between(0, 60),  # a loaded machine may stall a poll
        (FLEET, "Targets up / down", "A"): equals(1),
        (FLEET, "Targets up / down", "B"): EMPTY,  # no target is down
        (FLEET, "Transition-log spool", "A"): DATA,  # OTLP is configured: the spool exists
        (FLEET, "Transition-log spool", "B"): equals(0),  # the receiver is up: nothing dropped
        (FLEET, "Web configs not in force", "A"): equals(0),  # no --web.config.file: the vector(0)
        (FLEET, "Failed durable writes", "A"): EMPTY,  # --state.file on a healthy disk: no exporter failing
        (FLEET, "Unhealthy exporters", "A"): EMPTY,  # everything is healthy
        (FLEET, "Unhealthy exporters", "B"): EMPTY,
        (FLEET, "Unhealthy exporters", "C"): EMPTY,
        (FLEET, "Exporter versions", "A"): equals(1),
        (FLEET, "IMDS api-versions in use", "A"): equals(1),
        (VM, "variable job", "variable"): DATA,
        (VM, "variable instance", "variable"): DATA,
        (VM, "IMDS", "A"): equals(1),
        (VM, "Listed events", "A"): equals(listed),
        (VM, "Soonest NotBefore", "A"): between(0, 240),
        (VM, "Longest in Started", "A"): NONZERO,
        (VM, "Since last good poll", "A"): between(0, 5),
        (VM, "Scrape", "A"): equals(1),
        (VM, "Events now", "A"): series_count(listed),  # the VM view shows its neighbours' events too
        (VM, "Events now", "B"): series_count(timed),
        (VM, "Events now", "C"): series_count(timed),
        (VM, "Events now", "D"): series_count(started),
        (VM, "Events now", "E"): series_count(listed),
        (VM, "Events now", "F"): EMPTY,
        (VM, "Event timeline", "A"): series_count(listed),
        (VM, "Event impact", "A"): series_count(listed),
        (VM, "Time until NotBefore", "A"): series_count(timed),
        (VM, "Time in Started", "A"): series_count(started),
        (VM, "DocumentIncarnation", "A"): NONZERO,
        (VM, "Transitions", "A"): NONZERO,
        (VM, "Failed writes (time range)", "A"): equals(0),  # --state.file on a healthy disk
        (VM, "Notice received (time range)", "A"): NONZERO,
        (VM, "Mean notice by event type (time range)", "A"): FINITE,
        (VM, "Time in Started, p90 by event type (time range)", "A"): FINITE,  # the completed Freezes
        (VM, "Completed events: mean time in Started", "A"): FINITE,
        (VM, "Approvals by result", "A"): DATA,
        (VM, "IMDS request latency", "A"): FINITE,
        (VM, "IMDS request latency", "B"): FINITE,
        (VM, "IMDS request latency", "C"): FINITE,
        (VM, "IMDS requests by code", "A"): NONZERO,
        (VM, "Poll errors by reason", "A"): DATA,
        (VM, "IMDS up and poll freshness", "A"): equals(1),
        (VM, "IMDS up and poll freshness", "B"): between(0, 5),
        # --state.file: the state file's and the spool's writes (NaN in a window without a write)
        (VM, "Durable writes (state file, log spool)", "A"): DATA,
        (VM, "Durable writes (state file, log spool)", "B"): DATA,
    }


def queries(stack: Stack) -> list[DashboardQuery]:
    return dashboard_queries(
        job=JOB,
        instance=stack.instance,
        rate_interval=RATE_INTERVAL,
        interval="1s",
        range_="5m",
        include_variables=True,
    )


def results(stack: Stack, q: DashboardQuery) -> list[dict[str, Any]]:
    """What Grafana would draw: an instant query's vector, or a range query over the test's lifetime."""
    if q.instant:
        return stack.prometheus.query(q.expr)
    return stack.prometheus.query_range(q.expr, start=stack.started_at, end=time.time(), step=1)


def values_of(result: list[dict[str, Any]]) -> list[float]:
    points = [s["value"] for s in result if "value" in s] + [p for s in result for p in s.get("values", [])]
    return [float(v) for _, v in points]


def series_now(result: list[dict[str, Any]]) -> int:
    """Series an instant result has, or series of a range result with a point at its last step."""
    if all("value" in s for s in result):
        return len(result)
    last = max(float(p[0]) for s in result for p in s["values"])
    return sum(1 for s in result if float(s["values"][-1][0]) == last)


# ----- the tests -------------------------------------------------------------------------------------


def test_every_dashboard_query_runs(stack: Stack) -> None:
    """Every query (Grafana variables substituted) is accepted by Prometheus, instant and as a range."""
    qs = queries(stack)
    assert len(qs) >= 40, f"suspiciously few dashboard queries: {len(qs)}"
    errors = []
    for q in qs:
        try:
            stack.prometheus.query(q.expr)
            if not q.instant:
                stack.prometheus.query_range(q.expr, start=stack.started_at, end=time.time(), step=1)
        except AssertionError as error:
            errors.append(f"{q.where}: {q.expr}\n  {str(error).splitlines()[0]}")
    assert not errors, "dashboard queries Prometheus rejects:\n" + "\n".join(errors) + stack.diagnostics()


def test_dashboard_panels_show_expected_data(stack: Stack) -> None:
    """Panels that should show data do (with the right values where the scene fixes them); the rest are
    empty for a stated reason. Every query must be classified here: a new panel fails until it is."""
    expectations = panel_expectations(stack)
    qs = queries(stack)
    keys = {(q.dashboard_file, q.panel_title, q.ref_id) for q in qs}
    unclassified = sorted(keys - expectations.keys())
    stale = sorted(expectations.keys() - keys)
    assert not unclassified, f"dashboard queries without an expectation in panel_expectations(): {unclassified}"
    assert not stale, f"expectations for queries the dashboards no longer have: {stale}"

    pending = {(q.dashboard_file, q.panel_title, q.ref_id): q for q in qs}
    last: dict[tuple[str, str, str], str] = {}
    deadline = time.monotonic() + DATA_DEADLINE
    while pending:
        for key, q in list(pending.items()):
            result = results(stack, q)
            expect = expectations[key]
            if expect.check(values_of(result), series_now(result)):
                del pending[key]
            else:
                last[key] = (
                    f"{series_now(result)} series now ({len(result)} in all), "
                    f"values {sorted(set(values_of(result)))[:8]}"
                )
        if not pending or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    failures = [
        f"{q.where} ({'instant' if q.instant else 'range'}): expected {expectations[k].what}, got {last[k]}\n  {q.expr}"
        for k, q in pending.items()
    ]
    assert not failures, "panels not showing what they should:\n" + "\n".join(failures) + stack.diagnostics()


def _rules(stack: Stack) -> list[dict[str, Any]]:
    return list(stack.prometheus.api("rules")["groups"])


def test_every_rule_evaluates_ok(stack: Stack) -> None:
    """Prometheus loaded every shipped rule, evaluated each at least twice on the final state, all ok."""
    shipped = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    want = {(g["name"], r.get("alert") or r.get("record")) for g in shipped["groups"] for r in g["rules"]}
    t0 = time.time()
    # Two evaluations after t0 (interval 1s): every group's last evaluation is at least 1s after t0.
    wait_for(
        lambda: all(_ts(g["lastEvaluation"]) >= t0 + 1 for g in _rules(stack)),
        15,
        "two rule evaluations of every group",
        interval=0.2,
    )
    groups = _rules(stack)
    loaded = {(g["name"], r["name"]) for g in groups if g["file"] == str(RULES) for r in g["rules"]}
    assert loaded == want, f"shipped rules Prometheus did not load: {want - loaded}; unexpected: {loaded - want}"
    unhealthy = [
        f"{g['file']} / {g['name']} / {r['name']}: health={r['health']} lastError={r.get('lastError')!r}"
        for g in groups
        for r in g["rules"]
        if r["health"] != "ok" or r.get("lastError")
    ]
    assert not unhealthy, "rules not healthy:\n" + "\n".join(unhealthy) + stack.diagnostics()
    assert {g["file"] for g in groups} == {str(RULES), str(stack.override_rules)}


def _ts(rfc3339: str) -> float:
    """Prometheus' RFC 3339 timestamps carry nanoseconds; datetime takes microseconds."""
    match = re.fullmatch(r"(\S+T\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)", rfc3339)
    assert match, rfc3339
    whole, frac, zone = match.groups()
    base = datetime.fromisoformat(whole + ("+00:00" if zone == "Z" else zone)).timestamp()
    return base + float(f"0.{frac or 0}")


def expected_alerts(stack: Stack) -> dict[tuple[str, str], set[str]]:
    """(alertname, state) -> event_ids ("" for an alert about the exporter), for the shipped rules: the
    paging policy of alerts/runbook.md on the scene's events."""
    s = stack.scene
    return {
        # Platform events nobody chose: the warning (not the long-notice Redeploy: it has its own).
        ("AzureScheduledEventImpactfulScheduled", "firing"): {s.id("imminent-reboot"), s.id("rescheduled-redeploy")},
        # The only page: the platform Reboot within the 15-minute lead time (not the Redeploy, 30 min ahead).
        ("AzureScheduledEventNotBeforeImminent", "firing"): {s.id("imminent-reboot")},
        ("AzureScheduledEventLongNoticeRedeploy", "firing"): {s.id("long-notice-redeploy")},
        # Info, routed to nobody: a Spot eviction, the user's own Reboot, a pause.
        ("AzureScheduledEventSpotEvictionScheduled", "firing"): {s.id("spot-preempt")},
        ("AzureScheduledEventSpotEvictionRisk", "firing"): {s.id("spot-eviction-risk")},
        ("AzureScheduledEventUserInitiatedScheduled", "firing"): {s.id("user-reboot")},
        # "Memory-preserving update" is a Freeze that does not say "Live Migration": impact pause.
        ("AzureScheduledEventPauseScheduled", "firing"): {s.id("scheduled-freeze")},
        ("AzureScheduledEventStarted", "firing"): {s.id("hardware-failure"), s.id("started-redeploy")},
        # Info, routed to nobody: it is there to inhibit node-down alerts while these two run.
        ("AzureScheduledEventMaintenanceWindow", "firing"): {s.id("hardware-failure"), s.id("started-redeploy")},
        # The Reboot that appeared already Started while the exporter watched: Azure's failure path.
        ("AzureScheduledEventHardwareFailure", "firing"): {s.id("hardware-failure")},
        # The user Reboot's pre-approval hook fails (scene.py): a new exporter's first failure counts.
        ("AzureScheduledEventsApprovalFailed", "firing"): {""},
    }


# Not asserted either way.
DONT_CARE: frozenset[str] = frozenset()


def _active(stack: Stack, override: bool) -> dict[tuple[str, str], set[str]]:
    out: dict[tuple[str, str], set[str]] = {}
    for alert in stack.prometheus.api("alerts")["alerts"]:
        labels = alert["labels"]
        if (labels.get(OVERRIDE_LABEL) == "true") != override or labels["alertname"] in DONT_CARE:
            continue
        key = (labels["alertname"], alert["state"])
        out.setdefault(key, set()).add(labels.get("event_id", ""))
    return out


def test_expected_alerts_fire_and_nothing_else(stack: Stack) -> None:
    want = expected_alerts(stack)
    want_override = {(name, "firing"): ids for (name, _), ids in want.items()}  # for: 0s -> all firing
    try:
        wait_for(
            lambda: _active(stack, False) == want and _active(stack, True) == want_override,
            20,
            "exactly the expected alerts to be active",
            interval=0.25,
        )
    except AssertionError as error:
        raise AssertionError(
            f"{error}\nshipped rules: expected {want}\n               got {_active(stack, False)}"
            f"\noverride copy: expected {want_override}\n               got {_active(stack, True)}"
            + stack.diagnostics()
        ) from None
    for alert in stack.prometheus.api("alerts")["alerts"]:
        labels, annotations = alert["labels"], alert["annotations"]
        where = f"{labels['alertname']} {labels.get('event_id', '')}"
        assert labels["instance"] == stack.instance and labels["job"] == JOB, where
        assert labels["severity"] in ("critical", "warning", "info"), where
        assert {"summary", "description", "runbook_url"} <= annotations.keys(), where
        for text in annotations.values():
            assert "<no value>" not in text and "error" not in text.lower(), f"{where}: badly rendered {text!r}"


def test_alertmanager_delivers_to_webhook(stack: Stack) -> None:
    """Prometheus -> Alertmanager (shipped routing tree and inhibit rules) -> the test's webhook."""

    def named(alertname: str, role: str, override: bool | None = None) -> Callable[[str, dict[str, Any]], bool]:
        def match(path: str, alert: dict[str, Any]) -> bool:
            labels = alert["labels"]
            return (
                labels.get("alertname") == alertname
                and labels.get("event_id") == stack.scene.id(role)
                and (override is None or (labels.get(OVERRIDE_LABEL) == "true") == override)
            )

        return match

    try:
        deliveries = {
            "pager": stack.webhook.wait_alert(
                named("AzureScheduledEventNotBeforeImminent", "imminent-reboot"),
                20,
                "NotBeforeImminent at the pager receiver",
            ),
            # Info is routed to nobody by default: the "null" receiver (a webhook only in the test).
            "null": stack.webhook.wait_alert(
                named("AzureScheduledEventStarted", "hardware-failure"), 20, "Started at the null receiver"
            ),
            "chat": stack.webhook.wait_alert(
                named("AzureScheduledEventLongNoticeRedeploy", "long-notice-redeploy", override=True),
                20,
                "LongNoticeRedeploy at the chat receiver",
            ),
        }
        wait_for(
            lambda: any(
                named("AzureScheduledEventImpactfulScheduled", "rescheduled-redeploy")(p, a)
                for p, a in stack.webhook.alerts()
            ),
            20,
            "ImpactfulScheduled delivered",
        )
    except AssertionError as error:
        got = sorted({(p, a["labels"].get("alertname", "")) for p, a in stack.webhook.alerts()})
        raise AssertionError(f"{error}\nwebhook got: {got}{stack.diagnostics()}") from None

    severity = {"pager": "critical", "chat": "warning", "null": "info"}
    for receiver, (path, alert) in deliveries.items():
        assert path == f"/hook/{receiver}", f"{alert['labels']['alertname']} routed to {path}, not {receiver}"
        assert alert["status"] == "firing"
        assert alert["labels"]["severity"] == severity[receiver]
        assert alert["labels"]["instance"] == stack.instance
        assert alert["annotations"]["summary"]
        assert alert["annotations"]["runbook_url"].startswith("https://"), alert["annotations"]
        assert "#azurescheduledevent" in alert["annotations"]["runbook_url"]

    # Inhibition (shipped alertmanager.yml): NotBeforeImminent mutes ImpactfulScheduled for the same event.
    # Whether ImpactfulScheduled slipped out before the inhibiting alert reached Alertmanager is a race
    # (they can come in separate batches, and the test's group_wait is 0s), so what is asserted is
    # Alertmanager's own verdict once both are there: suppressed, and by which alert.
    states = [
        a["status"]
        for a in stack.alertmanager.alerts()
        if a["labels"].get("alertname") == "AzureScheduledEventImpactfulScheduled"
        and a["labels"].get("event_id") == stack.scene.id("imminent-reboot")
    ]
    assert states and all(s["state"] == "suppressed" and s["inhibitedBy"] for s in states), states


def _referenced_names() -> tuple[set[str], set[str]]:
    """(metric names used by dashboards and rules, recording-rule names)."""
    rules = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    recorded = {r["record"] for g in rules["groups"] for r in g["rules"] if "record" in r}
    names = {n for g in rules["groups"] for r in g["rules"] for n in metric_names(str(r["expr"]))}
    for q in dashboard_queries(job=JOB, instance="127.0.0.1:1", rate_interval=RATE_INTERVAL):
        names |= metric_names(q.expr)
    return names, recorded


def test_every_used_metric_name_is_exposed(stack: Stack) -> None:
    names, recorded = _referenced_names()
    assert recorded <= names, "recording rules nobody uses"  # sanity: the parser sees the rules' names
    used = names - recorded - PROMETHEUS_METRICS
    assert len(used) >= 15, sorted(used)
    assert all(n.startswith("azure_scheduled_events_") for n in used), sorted(used)
    exposed = {name for name, _ in samples(stack.exporter.metrics())}
    missing = sorted(used - exposed - EXPECTED_ABSENT.keys())
    assert not missing, f"used by dashboards/rules but not in the live exposition: {missing}"
    assert EXPECTED_ABSENT.keys() <= used, "EXPECTED_ABSENT lists names nothing uses: remove them"


def test_expected_absent_metrics_are_absent(stack: Stack) -> None:
    """Fails when a name of EXPECTED_ABSENT shows up: then remove it from the list (and the panel's EMPTY)."""
    exposed = {name for name, _ in samples(stack.exporter.metrics())}
    appeared = sorted(EXPECTED_ABSENT.keys() & exposed)
    assert not appeared, f"now exposed, remove from EXPECTED_ABSENT in {__file__}: {appeared}"


def test_live_exposition_passes_promtool_check_metrics(stack: Stack) -> None:
    promtool = require_binary("promtool")
    text = stack.exporter.metrics()
    kinds = {name for name, _ in samples(text)}
    assert {
        "azure_scheduled_events_event_started_seconds",
        "azure_scheduled_events_notice_seconds_bucket",
        "azure_scheduled_events_started_duration_seconds_bucket",
    } <= kinds  # events in every state
    proc = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0 and not proc.stdout.strip(), (
        f"promtool check metrics exited {proc.returncode}:\n{proc.stdout}{proc.stderr}"
    )


def test_approval_failure_is_visible(stack: Stack) -> None:
    """The policy's hook fails for the User Reboot: hook_failed counted, no StartRequests sent."""
    event_id = stack.scene.id("user-reboot")
    wait_for(
        lambda: (
            (
                value(
                    stack.exporter.metrics(),
                    "azure_scheduled_events_approvals_total",
                    event_type="Reboot",
                    result="hook_failed",
                )
                or 0
            )
            >= 1
        ),
        10,
        "hook_failed counted",
    )
    assert not any(event_id in a.body for a in stack.sim.world.truth.approvals()), "approved despite the hook"
    wait_for(
        lambda: stack.prometheus.query(
            'azure_scheduled_events_approvals_total{result="hook_failed", event_type="Reboot"} >= 1'
        ),
        10,
        "Prometheus to scrape hook_failed",
    )
