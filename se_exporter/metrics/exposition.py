"""/metrics as bytes: the Prometheus text format (0.0.4) or OpenMetrics 1.0, as the scraper's Accept
header asks, only the samples named by ``name[]`` when given, gzipped when accepted.

What prometheus_client's ``make_wsgi_app`` did for the exporter, with its content negotiation
(``choose_encoder``: the first OpenMetrics or versioned text entry of Accept decides, the Content-Type
echoing version and escaping) and its name filter (samples whose name is listed). Every name the
exporter writes is a legacy Prometheus name, so the escaping schemes change nothing but the header.
``tests/test_exposition.py`` compares bytes and headers with prometheus_client's for the same input.
"""

from __future__ import annotations

import zlib
from collections.abc import Collection, Iterable
from urllib.parse import parse_qs

from se_exporter.metrics.families import MetricFamily, go_float

TEXT_0_0_4 = "text/plain; version=0.0.4; charset=utf-8"
OPENMETRICS_1_0_0 = "application/openmetrics-text; version=1.0.0; charset=utf-8"
_ESCAPINGS = ("allow-utf-8", "underscores", "dots", "values")
GZIP_LEVEL = 6  # Go's default, which Prometheus's own exporters compress with (prometheus_client uses 9)


def negotiate(accept: str | None) -> tuple[bool, str]:
    """Whether to write OpenMetrics, and the Content-Type, for an Accept header."""
    for accepted in (accept or "").split(","):
        kind, *params = (token.strip() for token in accepted.split(";"))
        options = dict(param.split("=", 1) for param in params if "=" in param)
        version = options.get("version", "")
        escaping = options.get("escaping", "underscores")
        escaping = escaping if escaping in _ESCAPINGS else "underscores"
        if kind == "application/openmetrics-text":
            if not version:
                return True, OPENMETRICS_1_0_0
            if _at_least_1(version):
                return True, f"application/openmetrics-text; version={version}; charset=utf-8; escaping={escaping}"
        elif kind == "text/plain" and version and _at_least_1(version):
            return False, f"text/plain; version=1.0.0; charset=utf-8; escaping={escaping}"
    return False, TEXT_0_0_4


def _at_least_1(version: str) -> bool:
    parts = version.split(".")
    try:
        return tuple(int(part) for part in parts) >= (1, 0, 0)
    except ValueError:
        return False


def render(families: Iterable[MetricFamily], *, openmetrics: bool, names: Collection[str] | None = None) -> bytes:
    """The exposition of ``families``; with ``names``, only the samples so named (families left empty
    are left out)."""
    lines: list[str] = []
    for family in families:
        samples = family.samples if names is None else [sample for sample in family.samples if sample[0] in names]
        if names is not None and not samples:
            continue
        lines += _head(family, openmetrics)
        lines += [f"{name}{labels} {go_float(value)}\n" for name, labels, value in samples]
    if openmetrics:
        lines.append("# EOF\n")
    return "".join(lines).encode("utf-8")


def _head(family: MetricFamily, openmetrics: bool) -> list[str]:
    help_text = family.documentation.replace("\\", r"\\").replace("\n", r"\n")
    name = family.name
    if openmetrics:
        help_text = help_text.replace('"', r"\"")
    elif family.kind == "counter":
        name += "_total"
    return [f"# HELP {name} {help_text}\n", f"# TYPE {name} {family.kind}\n"]


def answer(
    families: Iterable[MetricFamily], accept: str | None, accept_encoding: str | None, query: str
) -> tuple[list[tuple[str, str]], bytes]:
    """The headers and body of a /metrics answer."""
    openmetrics, content_type = negotiate(accept)
    names = parse_qs(query).get("name[]")
    body = render(families, openmetrics=openmetrics, names=set(names) if names else None)
    headers = [("Content-Type", content_type)]
    if any(coding.split(";")[0].strip().lower() == "gzip" for coding in (accept_encoding or "").split(",")):
        packer = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 31)  # 31: a gzip header and trailer
        body = packer.compress(body) + packer.flush()
        headers.append(("Content-Encoding", "gzip"))
    return headers, body
