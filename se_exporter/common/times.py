"""Time formats shared by every output: RFC 3339 text and OpenTelemetry's integer nanoseconds."""

from __future__ import annotations

from datetime import UTC, datetime


def rfc3339(moment: datetime) -> str:
    """``2022-04-11T22:26:58Z``: how log records, spans and the hook show a NotBefore."""
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def unix_nanos(unix_seconds: float) -> int:
    """OTel timestamps: integer nanoseconds since the epoch."""
    return round(unix_seconds * 1e9)
