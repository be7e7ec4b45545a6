"""The metric names' one prefix, and how a value becomes a label (bounded, whatever IMDS sends)."""

from __future__ import annotations

import hashlib

PREFIX = "azure_scheduled_events_"
MAX_LABEL_LENGTH = 128  # an absurd EventId or Resource must not blow up every scrape and the TSDB


def label(value: str) -> str:
    """A value over MAX_LABEL_LENGTH is cut, and keeps a digest of the whole (``<127 chars>…~<8 hex>``), so
    two long EventIds sharing a prefix stay two series (identical label sets make the exposition invalid)."""
    if len(value) <= MAX_LABEL_LENGTH:
        return value
    digest = hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{value[: MAX_LABEL_LENGTH - 1]}…~{digest}"


def affects_label(affects: bool | None) -> str:
    """``affects_this_vm``: "true", "false", or "unknown" while this VM's name is unknown."""
    return "unknown" if affects is None else "true" if affects else "false"


OTHER = "other"


class BoundedValues:
    """Label values of series that live as long as the process (counters, histograms): the known ones,
    plus at most ``limit`` others in the order first seen; any further value is folded into ``other``.

    An IMDS listing thousands of invented EventTypes once left thousands of permanent series per type
    behind; the events are still counted, under ``other``.
    """

    def __init__(self, known: tuple[str, ...], limit: int) -> None:
        self._kept = dict.fromkeys(known)
        self._limit = len(self._kept) + limit
        self.folded = 0  # values seen beyond the limit

    def __call__(self, value: str) -> str:
        if value in self._kept:
            return value
        if len(self._kept) < self._limit:
            self._kept[value] = None
            return value
        self.folded += 1
        return OTHER
