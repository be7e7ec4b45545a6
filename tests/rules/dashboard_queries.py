"""Every PromQL query of se-exporter's Grafana dashboards, with Grafana's variables substituted.

Used by the static dashboard tests (every query must parse) and meant for end-to-end tests that run
the queries against a real Prometheus scraping a live exporter::

    from tests.rules.dashboard_queries import dashboard_queries   # or: from rules.dashboard_queries ...

    for q in dashboard_queries(job="se-exporter", instance="127.0.0.1:10160", rate_interval="30s"):
        result = prometheus_query(q.expr)          # q.instant tells an instant from a range panel
        assert ..., f"{q.where}: {q.expr}"

Only the standard library is used, so the module can also be loaded by path
(``importlib.util.spec_from_file_location``) from anywhere.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DASHBOARDS_DIR = Path(__file__).resolve().parents[2] / "dashboards"

ALL = ".+"  # the allValue of the dashboards' job and instance variables


@dataclass(frozen=True)
class DashboardQuery:
    dashboard_uid: str
    dashboard_file: str
    panel_id: int | None  # None for a template variable's query
    panel_title: str  # the panel's title, or "variable <name>"
    ref_id: str
    raw_expr: str  # as written in the dashboard, with $job, $__rate_interval...
    expr: str  # variables substituted: plain PromQL
    instant: bool  # an instant query (stat, table, bar gauge) rather than a range query

    @property
    def where(self) -> str:
        return f"{self.dashboard_file} / {self.panel_title} / {self.ref_id}"


def load_dashboards(dashboards_dir: Path = DASHBOARDS_DIR) -> dict[str, dict[str, Any]]:
    """File name -> parsed dashboard, for every *.json directly in dashboards_dir."""
    return {p.name: json.loads(p.read_text(encoding="utf-8")) for p in sorted(dashboards_dir.glob("*.json"))}


def iter_panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, including those inside (collapsed) rows, rows themselves included."""
    for panel in dashboard.get("panels", []):
        yield panel
        yield from panel.get("panels", [])


def _regex_escape(value: str) -> str:
    """Escape a multi-value variable's value the way Grafana's Prometheus data source does."""
    value = value.replace("\\", "\\\\\\\\")
    return re.sub(r"[$^*{}\[\]'+?.()|]", lambda m: "\\\\" + m.group(0), value)


def format_multi(value: str | Sequence[str] | None) -> str:
    """Grafana's rendering of a multi-value, include-All variable inside a regex matcher."""
    if value is None:
        return ALL
    if isinstance(value, str):
        return _regex_escape(value)
    values = list(value)
    if not values:
        return ALL
    if len(values) == 1:
        return _regex_escape(values[0])
    return "(" + "|".join(_regex_escape(v) for v in values) + ")"


_VARIABLE = re.compile(r"\$\{(\w+)(?::[^}]*)?\}|\$(\w+)|\[\[(\w+)\]\]")


def substitute(
    expr: str,
    *,
    job: str | Sequence[str] | None = None,
    instance: str | Sequence[str] | None = None,
    rate_interval: str = "1m",
    interval: str = "15s",
    range_: str = "1h",
    extra: dict[str, str] | None = None,
) -> str:
    """Replace Grafana variables in a query.

    job / instance: None (or []) means "All" (``.+``); a string or a list of strings selects those
    values, regex-escaped like Grafana does. Unknown variables raise ValueError.
    """
    range_seconds = _seconds(range_)
    values = {
        "job": format_multi(job),
        "instance": format_multi(instance),
        "__rate_interval": rate_interval,
        "__interval": interval,
        "__interval_ms": str(int(_seconds(interval) * 1000)),
        "__range": range_,
        "__range_s": str(int(range_seconds)),
        "__range_ms": str(int(range_seconds * 1000)),
        **(extra or {}),
    }

    def replace(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2) or match.group(3)
        if name not in values:
            raise ValueError(f"unknown Grafana variable ${name} in: {expr}")
        return values[name]

    return _VARIABLE.sub(replace, expr)


def _seconds(duration: str) -> float:
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|[smhdwy])", duration)
    if not parts or "".join(n + u for n, u in parts) != duration:
        raise ValueError(f"not a Prometheus duration: {duration!r}")
    return sum(float(n) * units[u] for n, u in parts)


def _variable_selector(query: str) -> str | None:
    """label_values(<selector>, label) -> <selector>; None for label_values(label)."""
    match = re.fullmatch(r"\s*label_values\((.*),\s*\w+\s*\)\s*", query, flags=re.S)
    return match.group(1).strip() if match else None


def raw_queries(
    dashboards_dir: Path = DASHBOARDS_DIR, *, include_variables: bool = True
) -> list[tuple[str, str, int | None, str, str, str, bool]]:
    """(uid, file, panel id, panel title, refId, raw expr, instant) for every query."""
    out: list[tuple[str, str, int | None, str, str, str, bool]] = []
    for file, dash in load_dashboards(dashboards_dir).items():
        uid = dash.get("uid", "")
        if include_variables:
            for var in dash.get("templating", {}).get("list", []):
                if var.get("type") != "query":
                    continue
                query = var.get("query")
                text = query.get("query", "") if isinstance(query, dict) else str(query or "")
                selector = _variable_selector(text)
                if selector:
                    out.append((uid, file, None, f"variable {var['name']}", "variable", selector, True))
        for panel in iter_panels(dash):
            for target in panel.get("targets", []):
                if target.get("expr"):
                    out.append(
                        (
                            uid,
                            file,
                            panel.get("id"),
                            panel.get("title", ""),
                            target.get("refId", ""),
                            target["expr"],
                            bool(target.get("instant")) and not target.get("range"),
                        )
                    )
    return out


def dashboard_queries(
    job: str | Sequence[str] | None = None,
    instance: str | Sequence[str] | None = None,
    *,
    rate_interval: str = "1m",
    interval: str = "15s",
    range_: str = "1h",
    include_variables: bool = True,
    dashboards_dir: Path = DASHBOARDS_DIR,
) -> list[DashboardQuery]:
    """Every dashboard query (and template-variable selector) with variables substituted.

    job / instance: None means "All" (``.+``), else a value or list of values as selected in Grafana.
    rate_interval / interval / range_: what Grafana would put for $__rate_interval, $__interval and
    $__range (Prometheus durations).
    """
    return [
        DashboardQuery(
            dashboard_uid=uid,
            dashboard_file=file,
            panel_id=panel_id,
            panel_title=title,
            ref_id=ref,
            raw_expr=raw,
            expr=substitute(
                raw, job=job, instance=instance, rate_interval=rate_interval, interval=interval, range_=range_
            ),
            instant=instant,
        )
        for uid, file, panel_id, title, ref, raw, instant in raw_queries(
            dashboards_dir, include_variables=include_variables
        )
    ]
