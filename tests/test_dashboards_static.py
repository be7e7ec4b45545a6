"""Static checks of the Grafana dashboards and their provisioning files (no Grafana needed)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.rules import dashboard_queries as dq
from tests.rules.promql import DESIGN_METRICS, PROMETHEUS_METRICS, SPOOL_METRICS, exposed_names, metric_names
from tests.rules.tools import require, run

pytestmark = pytest.mark.pure

REPO_ROOT = Path(__file__).resolve().parents[1]
DASHBOARDS = REPO_ROOT / "dashboards"
EXPECTED_UIDS = {"fleet-overview.json": "se-exporter-fleet", "vm-detail.json": "se-exporter-vm"}
NO_UNIT_PANELS = {"row", "text", "news", "dashlist", "alertlist"}

DASHBOARDS_BY_FILE = dq.load_dashboards(DASHBOARDS)
PANELS = [
    (file, panel)
    for file, dash in DASHBOARDS_BY_FILE.items()
    for panel in dq.iter_panels(dash)
    if panel.get("type") != "row"
]
PANEL_IDS = [f"{file}:{panel.get('title')}" for file, panel in PANELS]
QUERIES = dq.dashboard_queries()


def _recording_rules() -> set[str]:
    doc = yaml.safe_load((REPO_ROOT / "alerts" / "se-exporter.rules.yml").read_text(encoding="utf-8"))
    return {r["record"] for g in doc["groups"] for r in g["rules"] if "record" in r}


def _walk(obj: Any) -> Any:
    if isinstance(obj, dict):
        yield obj
        for value in obj.values():
            yield from _walk(value)
    elif isinstance(obj, list):
        for value in obj:
            yield from _walk(value)


def test_generated_files_are_up_to_date() -> None:
    proc = subprocess.run(
        [sys.executable, DASHBOARDS / "generate.py", "--check"], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, f"run `python dashboards/generate.py`\n{proc.stdout}\n{proc.stderr}"


def test_expected_dashboards_with_stable_unique_uids() -> None:
    assert {f: d.get("uid") for f, d in DASHBOARDS_BY_FILE.items()} == EXPECTED_UIDS
    for dash in DASHBOARDS_BY_FILE.values():
        assert re.fullmatch(r"[a-zA-Z0-9_-]{1,40}", dash["uid"])


@pytest.mark.parametrize("file", sorted(EXPECTED_UIDS))
def test_dashboard_is_provisioning_safe(file: str) -> None:
    dash = DASHBOARDS_BY_FILE[file]
    text = (DASHBOARDS / file).read_text(encoding="utf-8")
    assert "__inputs" not in text and "__requires" not in text, "export-for-sharing artefacts"
    assert "${DS_" not in text, "hard-coded import-time datasource placeholder"
    assert dash.get("id") is None
    assert 36 <= dash["schemaVersion"] <= 41
    assert dash["title"] and dash.get("tags")
    for node in _walk(dash):
        ds = node.get("datasource")
        if isinstance(ds, dict) and ds.get("type") == "prometheus":
            assert ds.get("uid") == "${datasource}", f"hard-coded datasource in {node.get('title', node)}"


@pytest.mark.parametrize("file", sorted(EXPECTED_UIDS))
def test_template_variables(file: str) -> None:
    variables = {v["name"]: v for v in DASHBOARDS_BY_FILE[file]["templating"]["list"]}
    ds = variables["datasource"]
    assert ds["type"] == "datasource" and ds["query"] == "prometheus"
    for name in ("job", "instance"):
        var = variables[name]
        assert var["type"] == "query"
        assert var["multi"] is True and var["includeAll"] is True and var["allValue"] == ".+"
        assert var["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
        assert query.startswith("label_values(") and query.endswith(f", {name})")
    assert "$job" in variables["instance"]["query"], "instance depends on the selected job"


@pytest.mark.parametrize(("file", "panel"), PANELS, ids=PANEL_IDS)
def test_panel_has_title_description_unit(file: str, panel: dict[str, Any]) -> None:
    assert panel.get("title", "").strip()
    assert len(panel.get("description", "").strip()) >= 20, "describe what the panel shows"
    if panel["type"] not in NO_UNIT_PANELS:
        assert panel.get("fieldConfig", {}).get("defaults", {}).get("unit"), "set a unit"
    assert panel.get("targets"), "panel without queries"
    assert panel.get("gridPos"), "panel without position"


@pytest.mark.parametrize("file", sorted(EXPECTED_UIDS))
def test_panel_ids_unique_and_layout_without_overlap(file: str) -> None:
    panels = list(dq.iter_panels(DASHBOARDS_BY_FILE[file]))
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids))
    cells: dict[tuple[int, int], str] = {}
    for p in panels:
        g = p["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{p['title']} overlaps {cells[(x, y)]}"
                cells[(x, y)] = p["title"]


def test_range_windows_use_grafana_intervals() -> None:
    for q in QUERIES:
        for window in re.findall(r"\[([^\]]*)\]", q.raw_expr):
            assert window in ("$__rate_interval", "$__range"), f"{q.where}: [{window}] in {q.raw_expr}"
        for fn in re.findall(r"\b(rate|irate)\s*\(", q.raw_expr):
            assert "[$__rate_interval]" in q.raw_expr, f"{q.where}: {fn}() without $__rate_interval"


def test_every_selector_is_filtered_by_job_and_instance() -> None:
    for q in QUERIES:
        if q.panel_id is None:
            continue  # template variables filter themselves
        for name in metric_names(q.raw_expr):
            occurrences = re.findall(rf"(?<![\w:]){re.escape(name)}(\{{[^}}]*\}})?", q.raw_expr)
            for matchers in occurrences:
                if name.startswith("job:"):  # a job-level recording rule: no instance label to filter on
                    assert 'job=~"$job"' in matchers, f"{q.where}: {name} not filtered by $job"
                    continue
                assert 'job=~"$job"' in matchers and 'instance=~"$instance"' in matchers, (
                    f"{q.where}: {name} not filtered by $job and $instance"
                )


def test_dashboards_use_only_contract_metric_names() -> None:
    allowed = (
        exposed_names(DESIGN_METRICS) | exposed_names(SPOOL_METRICS) | set(PROMETHEUS_METRICS) | _recording_rules()
    )
    used: set[str] = set()
    for q in QUERIES:
        names = metric_names(q.expr)
        unknown = names - allowed
        assert not unknown, f"{q.where}: unknown metric(s) {sorted(unknown)}"
        used |= names
    # The dashboards cover every metric of the contract.
    missing = exposed_names(DESIGN_METRICS) - used
    missing -= {n for n in missing if re.search(r"_(sum|count)$", n) and n[:-4] + "_bucket" in used}
    missing -= {n for n in missing if n.endswith("_count") and n[:-6] + "_bucket" in used}
    assert not missing - {"azure_scheduled_events_event_not_before_timestamp_seconds"}, sorted(missing)


def test_required_panels_are_present() -> None:
    titles = {file: {p.get("title") for p in dq.iter_panels(d)} for file, d in DASHBOARDS_BY_FILE.items()}
    assert {
        "Current events",
        "Soonest NotBefore",
        "VMs with pending events by type and status",
        "Transitions",
        "Approvals by result",
        "Poll errors by reason",
        "Time since last successful poll",
        "Targets up / down",
    } <= titles["fleet-overview.json"]
    assert {
        "Event timeline",
        "DocumentIncarnation",
        "Notice received (time range)",
        "Time in Started",
        "IMDS request latency",
        "Poll errors by reason",
    } <= titles["vm-detail.json"]
    kinds = {p["type"] for p in dq.iter_panels(DASHBOARDS_BY_FILE["vm-detail.json"])}
    assert "state-timeline" in kinds


def test_data_links_point_at_existing_dashboards() -> None:
    uids = set(EXPECTED_UIDS.values())
    for dash in DASHBOARDS_BY_FILE.values():
        for node in _walk(dash):
            url = node.get("url")
            if isinstance(url, str) and url.startswith("/d/"):
                assert url.split("/")[2] in uids, url


def test_substitution_of_grafana_variables() -> None:
    expr = 'rate(x{job=~"$job", instance=~"${instance}"}[$__rate_interval]) [$__range] $__interval'
    assert dq.substitute(expr) == 'rate(x{job=~".+", instance=~".+"}[1m]) [1h] 15s'
    got = dq.substitute(expr, job=["a", "b"], instance="10.0.0.1:10160", rate_interval="2m", range_="6h")
    assert got == 'rate(x{job=~"(a|b)", instance=~"10\\\\.0\\\\.0\\\\.1:10160"}[2m]) [6h] 15s'
    with pytest.raises(ValueError, match="unknown Grafana variable"):
        dq.substitute("x{a=~'$nope'}")


def test_query_helper_returns_every_query() -> None:
    queries = dq.dashboard_queries(job="se-exporter", instance="127.0.0.1:10160")
    n_targets = sum(len(p.get("targets", [])) for _, p in PANELS)
    assert len([q for q in queries if q.panel_id is not None]) == n_targets
    assert all("$" not in q.expr for q in queries), [q.expr for q in queries if "$" in q.expr]
    assert any(q.instant for q in queries) and any(not q.instant for q in queries)


@pytest.mark.debian
def test_dashboard_queries_parse_with_promtool(tmp_path: Path) -> None:
    """Every query, variables substituted, parses: each becomes a recording rule for promtool."""
    promtool = require("promtool")
    groups = [
        {"name": f"q{i:03d} {q.where}", "rules": [{"record": f"dashboard_query_{i}", "expr": q.expr}]}
        for i, q in enumerate(dq.dashboard_queries(job=["se-exporter", "b"], instance="10.0.0.1:10160"))
    ]
    rules = tmp_path / "dashboard-queries.rules.yml"
    rules.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    out = run([promtool, "check", "rules", rules])
    assert f"SUCCESS: {len(groups)} rules found" in out, out


def test_provisioning_files() -> None:
    prov = DASHBOARDS / "provisioning"
    providers = yaml.safe_load((prov / "dashboards" / "se-exporter.yml").read_text(encoding="utf-8"))
    assert providers["apiVersion"] == 1
    (provider,) = providers["providers"]
    assert provider["type"] == "file" and provider["options"]["path"]
    datasources = yaml.safe_load((prov / "datasources" / "prometheus.yml").read_text(encoding="utf-8"))
    (ds,) = datasources["datasources"]
    assert ds["type"] == "prometheus" and ds["uid"] == "prometheus"
    assert ds["url"] == "http://prometheus:9090"


def test_every_impact_has_its_colour_in_the_timeline() -> None:
    """One source: a new impact in se_exporter.imds.impact must get a colour, or the timeline hides it."""
    from dashboards.mixin.mappings import IMPACT_COLOURS
    from se_exporter.imds.impact import IMPACTS

    assert sorted(impact for impact, _ in IMPACT_COLOURS) == sorted(IMPACTS)


def _axis_of(panel: dict[str, Any]) -> dict[str, str]:
    """refId -> the axis its series are drawn on ("right" when an override puts that query there)."""
    right = {
        override["matcher"]["options"]
        for override in panel.get("fieldConfig", {}).get("overrides", [])
        if override["matcher"]["id"] == "byFrameRefID"
        and {"id": "custom.axisPlacement", "value": "right"} in override["properties"]
    }
    return {t["refId"]: "right" if t["refId"] in right else "left" for t in panel.get("targets", [])}


def test_one_kind_of_value_per_axis() -> None:
    """Issue 40: a queue depth, a rate and a count shared an axis. A rate (per second) and a level never do."""
    for file, dashboard in dq.load_dashboards().items():
        for panel in dq.iter_panels(dashboard):
            if panel.get("type") != "timeseries":
                continue
            axes: dict[str, set[bool]] = {}
            for target in panel["targets"]:
                is_rate = bool(re.search(r"\brate\(|:rate\w*\b", target["expr"]))
                axes.setdefault(_axis_of(panel)[target["refId"]], set()).add(is_rate)
            assert all(len(kinds) == 1 for kinds in axes.values()), f"{file} / {panel['title']}: {axes}"


def test_both_dashboards_have_an_ad_hoc_filter_for_the_labels_users_add() -> None:
    for file, dashboard in dq.load_dashboards().items():
        adhoc = [v for v in dashboard["templating"]["list"] if v["type"] == "adhoc"]
        assert [v["datasource"] for v in adhoc] == [{"type": "prometheus", "uid": "${datasource}"}], file
