"""Time shared by every stage: RFC 3339 text, OpenTelemetry's integer nanoseconds, the time left to a deadline."""

from __future__ import annotations

import time
from datetime import UTC, datetime


def rfc3339(moment: datetime) -> str:
    """``2022-04-11T22:26:58Z``: how log records, spans and the hook show a NotBefore."""
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def time_left(deadline: float) -> float:
    """Seconds until ``deadline`` (a ``time.monotonic``), 0 once it has passed."""
    return max(0.0, deadline - time.monotonic())


def unix_nanos(unix_seconds: float) -> int:
    """OTel timestamps: integer nanoseconds since the epoch."""
    return round(unix_seconds * 1e9)
