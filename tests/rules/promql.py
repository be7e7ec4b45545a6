"""Small PromQL helpers for static checks, and the metric names fixed by docs/design.md.

No PromQL parser is needed here: promtool does the real parsing (see the tests). These helpers only
find the metric names an expression uses, which is enough to check them against the contract.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
# In CI and in the development checkout, the design contract sits beside the repository.
DESIGN_MD = REPO_ROOT / "docs" / "design.md"


def design_md_metrics(path: Path = DESIGN_MD) -> dict[str, str]:
    """The metric table of docs/design.md: rows like | `azure_scheduled_events_x` | gauge | ..."""
    rows = re.findall(
        r"^\|\s*`(azure_scheduled_events_\w+)`\s*\|\s*([a-z]+)", path.read_text(encoding="utf-8"), flags=re.M
    )
    return dict(rows)


# The metric table of the contract: name -> type.
DESIGN_METRICS: dict[str, str] = design_md_metrics()
# The log spool's metrics, rendered only while OTLP log export is on.
SPOOL_METRICS: dict[str, str] = {
    name: kind for name, kind in DESIGN_METRICS.items() if name.startswith("azure_scheduled_events_log_spool_")
}

# Series Prometheus itself creates for every target.
PROMETHEUS_METRICS = frozenset({"up"})

_KEYWORDS = frozenset(
    {
        # operators and modifiers
        "and",
        "or",
        "unless",
        "atan2",
        "bool",
        "offset",
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
        "inf",
        "nan",
        # aggregation operators (may be followed by "by (...)" rather than "(")
        "sum",
        "min",
        "max",
        "avg",
        "group",
        "stddev",
        "stdvar",
        "count",
        "count_values",
        "bottomk",
        "topk",
        "quantile",
    }
)


def exposed_names(metrics: dict[str, str]) -> set[str]:
    """Series names a set of metric families exposes (histograms: _bucket, _sum, _count)."""
    names: set[str] = set()
    for name, kind in metrics.items():
        if kind == "histogram":
            names.update(f"{name}{suffix}" for suffix in ("_bucket", "_sum", "_count"))
        else:
            names.add(name)
    return names


def metric_names(expr: str) -> set[str]:
    """The metric (or recording rule) names a PromQL expression selects."""
    s = re.sub(r"#[^\n]*", "", expr)  # comments
    s = re.sub(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|`[^`]*`', '""', s)  # string literals
    s = re.sub(r"\{[^}]*\}", "{}", s)  # label matchers
    s = re.sub(r"\[[^\]]*\]", "[]", s)  # range and subquery windows
    s = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", r"\1", s)  # label lists
    names = set()
    for match in re.finditer(r"(?<![\w:.$])([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?", s):  # not Grafana's $__vars
        name, call = match.group(1), match.group(2)
        if call or name.lower() in _KEYWORDS:
            continue
        names.add(name)
    return names


def range_windows(expr: str) -> list[str]:
    """The contents of every [...] range or subquery window in an expression."""
    return re.findall(r"\[([^\]]*)\]", expr)


def github_anchor(heading: str) -> str:
    """The anchor GitHub generates for a Markdown heading (before de-duplication suffixes)."""
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")
