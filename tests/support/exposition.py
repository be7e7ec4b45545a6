"""Read a Prometheus exposition into {(name, labels): value} for assertions."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

Key = tuple[str, frozenset[tuple[str, str]]]


def samples(text: str) -> dict[Key, float]:
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(text: str, name: str, **labels: str) -> float | None:
    """The value of the one sample with this name and exactly these labels, or None."""
    return samples(text).get((name, frozenset(labels.items())))


def series(text: str, name: str) -> list[dict[str, str]]:
    return [dict(labels) for (sample_name, labels) in samples(text) if sample_name == name]
