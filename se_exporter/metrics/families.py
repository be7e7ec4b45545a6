"""Metric families as the exposition formats need them: each sample's name, its labels already rendered
(``{a="x",b="y"}``, sorted by name, escaped) and its value.

The data model of prometheus_client's ``Metric`` (a family: name, help, type, samples), kept to what the
exporter uses, with each label set rendered once when it is added rather than at every scrape in each
format: the static per-event families are built once per change of the listed events and rendered by
every scrape after it. prometheus_client is not imported at run time (its package imports its HTTP
servers and, with them, ``ssl``: OpenSSL's libraries, several MiB on every VM); ``tests/test_exposition.py``
holds the bytes equal to what it renders for the same families.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

Sample = tuple[str, str, float]  # sample name, rendered labels ("" for none), value


def go_float(value: float) -> str:
    """A value as Prometheus's Go clients write it (prometheus_client's ``floatToGoString``)."""
    value = float(value)
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if math.isnan(value):
        return "NaN"
    text = repr(value)
    dot = text.find(".")
    if value > 0 and dot > 6:  # Go switches to an exponent sooner than Python
        mantissa = f"{text[0]}.{text[1:dot]}{text[dot + 1 :]}".rstrip("0.")
        return f"{mantissa}e+{dot - 1:02d}"
    return text


def escape_label_value(value: str) -> str:
    if "\\" in value or "\n" in value or '"' in value:
        return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
    return value


def render_labels(names: Sequence[str], values: Sequence[str]) -> str:
    """``{name="value",...}`` in name order, as both exposition formats write a label set."""
    if not names:
        return ""
    pairs = sorted(zip(names, values, strict=True))
    return "{" + ",".join(f'{name}="{escape_label_value(value)}"' for name, value in pairs) + "}"


class MetricFamily:
    """One family: ``kind`` is "gauge", "counter" or "histogram"; ``name`` is a counter's without
    ``_total`` (OpenMetrics' family name), and ``sample_name`` (``name_total``) its samples'."""

    __slots__ = ("documentation", "kind", "label_names", "name", "sample_name", "samples")

    def __init__(
        self, name: str, documentation: str, kind: str, label_names: Sequence[str] = (), sample_name: str = ""
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.kind = kind
        self.label_names = tuple(label_names)
        self.sample_name = sample_name or name
        self.samples: list[Sample] = []

    def add_metric(self, values: Sequence[str], value: float) -> None:
        self.samples.append((self.sample_name, render_labels(self.label_names, values), value))


class GaugeMetricFamily(MetricFamily):
    def __init__(self, name: str, documentation: str, value: float | None = None, labels: Sequence[str] = ()) -> None:
        super().__init__(name, documentation, "gauge", labels)
        if value is not None:
            self.add_metric((), value)


class CounterMetricFamily(MetricFamily):
    def __init__(self, name: str, documentation: str, value: float | None = None, labels: Sequence[str] = ()) -> None:
        family = name.removesuffix("_total")
        super().__init__(family, documentation, "counter", labels, sample_name=family + "_total")
        if value is not None:
            self.add_metric((), value)
