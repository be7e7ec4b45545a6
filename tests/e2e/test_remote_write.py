"""The shipped rules, routes and dashboards on a real remote-write engine (issue 48; docs/scale.md).

Two clusters, each with its own Prometheus (external label ``cluster``: ``a`` and ``b``) scraping its VMs and
sending everything by remote_write to VictoriaMetrics; vmalert evaluates alerts/se-exporter.rules.yml there
and notifies a real Alertmanager with the shipped routes. Cluster ``a`` has a 200-VM wave of unapproved
platform Reboots within the lead time, cluster ``b`` one near Reboot among three VMs. Beside them, one
Prometheus scrapes both clusters (their ``cluster`` set as a target label) with the same rules: the single
server every dashboard query must answer the same on.

vmalert loads the shipped file as it is but for the ``for`` of AzureScheduledEventsExporterAbsentInCluster
(15 minutes), set to 0s so that a test can see it fire.
"""

from __future__ import annotations

import functools
import math
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.processes import Alertmanager, Prometheus, WebhookReceiver
from tests.e2e.remote_write import (
    SyntheticFleet,
    SyntheticVM,
    VictoriaMetrics,
    VMAlert,
    cluster_prometheus,
    single_prometheus,
    write_targets,
)
from tests.rules.dashboard_queries import dashboard_queries
from tests.rules.recipes import ALERTS, running
from tests.support.wait import wait_for

pytestmark = [pytest.mark.long, pytest.mark.debian, pytest.mark.posix]

WAVE = 200
PAGER = "/pager/pagerduty"
ABSENT_IN_CLUSTER = "AzureScheduledEventsExporterAbsentInCluster"
# Values that move with the clock (seconds to NotBefore, since the last poll, in Started) come from two
# scrapes up to one scrape interval apart: "within a step". Every other value must be equal.
SCRAPE_INTERVAL_SECONDS = 5.0
VMALERT_LOOKBACK_SECONDS = 5.0  # vmalert's -datasource.lookback (tests/e2e/remote_write.py)
MOVES_WITH_THE_CLOCK = re.compile(r"seconds_until_not_before|last_successful_poll|event_started_seconds|time\(\)")


class Stack:
    def __init__(self, tmp_path: Path, manager: Alertmanager) -> None:
        self.fleet = SyntheticFleet().start()
        not_before = time.time() + 600  # within the 15-minute lead time: every one of them pages
        for n in range(WAVE):
            self.fleet.vms["a", f"vm-a-{n:03}"] = SyntheticVM(
                [(f"R-a-{n:03}", "Reboot", "reboot", "platform", not_before)]
            )
        self.fleet.vms["b", "vm-b-0"] = SyntheticVM([("R-b-0", "Reboot", "reboot", "platform", not_before)])
        # In maintenance since 4 minutes (a Redeploy); an approved Reboot waiting for Azure; an exporter down.
        redeploy = ("D-b-1", "Redeploy", "redeploy", "platform", not_before - 840)
        self.fleet.vms["b", "vm-b-1"] = SyntheticVM(started=(redeploy, time.time() - 240))
        approved = [("R-b-2", "Reboot", "reboot", "platform", not_before)]
        self.fleet.vms["b", "vm-b-2"] = SyntheticVM(approved, approved_at=time.time() - 60, imds_up=0)
        self.fleet.vms["b", "vm-b-3"] = SyntheticVM(down=True)
        self.engine = VictoriaMetrics(tmp_path)
        self.targets = {name: tmp_path / f"targets-{name}.yml" for name in ("a", "b", "all")}
        for cluster in ("a", "b"):
            write_targets(self.targets[cluster], self.fleet.targets(cluster))
        everything = [
            *self.fleet.targets("a", with_cluster_label=True),
            *self.fleet.targets("b", with_cluster_label=True),
        ]
        write_targets(self.targets["all"], everything)
        self.engine.wait_ready()
        self.clusters = {
            cluster: cluster_prometheus(tmp_path / cluster, cluster, self.targets[cluster], self.engine.url)
            for cluster in ("a", "b")
        }
        rules = [ALERTS / "se-exporter.rules.yml"]
        self.single = single_prometheus(tmp_path / "single", self.targets["all"], rules)
        for server in (*self.clusters.values(), self.single):
            server.wait_ready()
        # vmalert starts once the engine answers the page's own expression with the whole wave (its 200 VMs
        # and vm-b-0) at the time vmalert's first evaluation asks about: now minus its lookback, so that
        # evaluation sees them all. Counting the events alone was not enough on a busy machine (the engine
        # held every event_info but not yet every VM's seconds to NotBefore: the first page named one VM),
        # nor was the count at "now" (vmalert asked 5 s earlier and paged 133, then 180, then 200).
        wait_for(lambda: self.count("azure_scheduled_events_event_info") == WAVE + 3, 60, "every event in the engine")
        imminent = _alert_expression("AzureScheduledEventNotBeforeImminent")
        wait_for(
            lambda: self.count(f"({imminent})", at=time.time() - VMALERT_LOOKBACK_SECONDS - 1) == WAVE + 1,
            120,
            "the whole wave imminent in the engine as vmalert will first look",
        )
        self.born = time.time()  # every series exists: a window that starts after this holds no birth
        self.vmalert = VMAlert([_vmalert_rules(tmp_path)], self.engine.url, manager.url, tmp_path)
        self.vmalert.wait_ready()
        self.started = time.time()

    def count(self, expr: str, engine: VictoriaMetrics | Prometheus | None = None, at: float | None = None) -> float:
        result = (engine or self.engine).query(f"count({expr})", at)
        return float(result[0]["value"][1]) if result else 0.0

    def close(self) -> None:
        for closing in (getattr(self, "vmalert", None), getattr(self, "single", None), self.engine):
            if closing is not None:
                closing.close()
        for server in getattr(self, "clusters", {}).values():
            server.close()
        self.fleet.stop()


def _alert_expression(name: str) -> str:
    rules = yaml.safe_load((ALERTS / "se-exporter.rules.yml").read_text(encoding="utf-8"))
    (expression,) = (r["expr"] for g in rules["groups"] for r in g["rules"] if r.get("alert") == name)
    return str(expression)


def _vmalert_rules(tmp_path: Path) -> Path:
    rules = yaml.safe_load((ALERTS / "se-exporter.rules.yml").read_text(encoding="utf-8"))
    for group in rules["groups"]:
        for rule in group["rules"]:
            if rule.get("alert") == ABSENT_IN_CLUSTER:
                rule["for"] = "0s"
    path = tmp_path / "se-exporter.rules.yml"
    path.write_text(yaml.safe_dump(rules, sort_keys=False), encoding="utf-8")
    return path


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[tuple[Stack, Alertmanager, WebhookReceiver]]:
    # The shipped group_wait (10 s for a page): it is what gathers a wave into one page. With a second's wait a
    # busy machine split the wave (vmalert's 200 alerts reached the page's group as 20, then 200).
    shipped = (ALERTS / "alertmanager.yml").read_text(encoding="utf-8")
    with running(tmp_path, shipped, group_wait=None) as (manager, webhook):
        built = Stack(tmp_path, manager)
        try:
            yield built, manager, webhook
        finally:
            built.close()


def test_the_rules_routes_and_dashboards_hold_on_a_remote_write_engine(
    stack: tuple[Stack, Alertmanager, WebhookReceiver],
) -> None:
    built, manager, webhook = stack
    _each_cluster_pages_once(built, manager, webhook)
    _every_dashboard_query_answers_as_on_one_prometheus(built)
    _a_cluster_that_loses_every_exporter_is_named(built)


def _each_cluster_pages_once(built: Stack, manager: Alertmanager, webhook: WebhookReceiver) -> None:
    def pages() -> list[dict[str, Any]]:
        return [d.payload for d in webhook.deliveries if d.path == PAGER]

    def summaries() -> list[str]:
        """The summary each incident shows now: Alertmanager sends a group's update with the group's
        ``dedup_key``, which PagerDuty folds into the same incident (a wave whose last alerts reached
        Alertmanager after its group_wait, on a loaded machine, is [FIRING:199], then [FIRING:200]: one page)."""
        incidents = {page.get("dedup_key", str(index)): page for index, page in enumerate(pages())}
        return sorted(page["payload"]["summary"] for page in incidents.values())

    expected = [
        "[FIRING:1] AzureScheduledEventNotBeforeImminent on vm-b-0",
        f"[FIRING:{WAVE}] AzureScheduledEventNotBeforeImminent",
    ]
    try:
        wait_for(lambda: summaries() == expected, 90, "one page for each cluster, the wave's naming its 200 VMs")
    except AssertionError as error:
        times = [round(d.at - built.started, 1) for d in webhook.deliveries]
        raise AssertionError(f"{error}: pages {summaries()} at {times}\n{built.vmalert.logs(3000)}") from None
    wait_for(
        lambda: all(a["status"]["state"] != "unprocessed" for a in manager.alerts()),
        60,
        "every alert through the notification pipeline",
    )
    imminent = [a for a in manager.alerts() if a["labels"]["alertname"] == "AzureScheduledEventNotBeforeImminent"]
    assert sorted(a["labels"]["cluster"] for a in imminent) == ["a"] * WAVE + ["b"]
    assert summaries() == expected, "the wave paged more than once"
    assert len({page.get("dedup_key") for page in pages()}) == 2, "one incident per cluster"


def _every_dashboard_query_answers_as_on_one_prometheus(built: Stack) -> None:
    # Recording rules over the engine (vmalert) and over the single server: both have run a while.
    for engine in (built.engine, built.single):
        wait_for(
            functools.partial(_recorded_for_both_clusters, built, engine),
            60,
            "the job-level recording rules of both clusters",
        )
    # Windows that hold no series' birth: there the engines differ by design (MetricsQL's increase() counts a
    # counter's first value, Prometheus' does not), which a fleet older than its panels' windows never shows.
    window = 20
    wait_for(lambda: time.time() - 5 - window > built.born + 5, 60, "series older than the panels' windows")
    at = time.time() - 5
    queries = dashboard_queries(job="se-exporter", instance=None, rate_interval=f"{window}s", range_=f"{window}s")
    answered, differences, empty = 0, [], []
    for query in queries:
        central, single = _vector(built.engine.query(query.expr, at)), _vector(built.single.query(query.expr, at))
        answered += bool(single)
        if not single:
            empty.append(query.where)
        if set(central) != set(single):
            differences.append(f"{query.where}: series {sorted(set(central) ^ set(single))[:3]}")
            continue
        slack = SCRAPE_INTERVAL_SECONDS if MOVES_WITH_THE_CLOCK.search(query.expr) else 0.0
        for labels, value in single.items():
            if not math.isclose(central[labels], value, rel_tol=1e-9, abs_tol=slack):
                differences.append(f"{query.where}: {dict(labels)} {central[labels]} != {value}")
    assert not differences, "\n".join(differences[:20])
    assert answered >= len(queries) * 0.8, f"only {answered} of {len(queries)} queries had data: empty {empty}"


def _recorded_for_both_clusters(built: Stack, engine: VictoriaMetrics | Prometheus) -> bool:
    return built.count("count by (cluster) (job:azure_scheduled_events_vms_with_pending_events:count)", engine) == 2


def _vector(result: list[dict[str, Any]]) -> dict[frozenset[tuple[str, str]], float]:
    """Series and values, NaN left out: MetricsQL leaves NaN results out (0/0 where nothing happened in the
    window), Prometheus returns them; Grafana shows both as no value."""
    values = {frozenset(r["metric"].items()): float(r["value"][1]) for r in result}
    return {labels: value for labels, value in values.items() if not math.isnan(value)}


def _a_cluster_that_loses_every_exporter_is_named(built: Stack) -> None:
    assert built.vmalert.firing(ABSENT_IN_CLUSTER) == []
    write_targets(built.targets["b"], [])  # cluster b's DaemonSet is gone: its Prometheus drops the targets
    named = wait_for(lambda: built.vmalert.firing(ABSENT_IN_CLUSTER), 90, "the absence of cluster b's exporters")
    assert [(a["cluster"], a["job"]) for a in named] == [("b", "se-exporter")]
    assert built.vmalert.firing("AzureScheduledEventsExporterAbsent") == [], "cluster a still reports"
