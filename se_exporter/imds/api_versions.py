"""What each Scheduled Events api-version lists, from the version table of Azure's docs.

A version before 2019-01-01 lists no Terminate event (scale-set deletions), before 2017-11-01 no Preempt
(Spot evictions), and before 2017-08-01 writes resource names with a leading underscore, so this VM would
not find itself in ``Resources``: such a version loses the very events a user runs the exporter for,
silently, and is refused. A later one only lacks fields, which the exporter shows as unknown.
"""

from __future__ import annotations

DEFAULT = "2020-07-01"
OLDEST = "2019-01-01"  # the first that lists every EventType
# (the first api-version with it, what an older one lacks), oldest first
ADDED = (
    ("2017-08-01", "resource names without a leading underscore (this VM would not find itself in Resources)"),
    ("2017-11-01", "Preempt events (Spot evictions)"),
    ("2019-01-01", "Terminate events (scale-set deletions)"),
    ("2019-04-01", "Description"),
    ("2019-08-01", "EventSource"),
    ("2020-07-01", "DurationInSeconds"),
)


def lacks(version: str) -> tuple[str, ...]:
    """What ``version`` (a well-formed date) does not have, newest first."""
    return tuple(what for since, what in reversed(ADDED) if version < since)


def refusal(version: str) -> str | None:
    """Why ``version`` cannot be used, or None."""
    lost = [what for since, what in reversed(ADDED) if version < since <= OLDEST]
    if not lost:
        return None
    return (
        f"api-version {version} is older than {OLDEST}: it has no {'; no '.join(lost)}, lost without a word "
        f"(use {OLDEST} or later; the default is {DEFAULT})"
    )
