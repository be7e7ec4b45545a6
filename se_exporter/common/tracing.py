"""What the poll loop and the IMDS client record on a span, with OpenTelemetry imported only when a span
exists: most VMs run without an OTLP endpoint, and then the API is never imported (0.4 MiB, and its
context package reads every installed distribution's entry points at import)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from opentelemetry import trace


def mark_error(span: trace.Span, error_type: str, message: str) -> None:
    from opentelemetry.trace import Status, StatusCode  # imported already: a span exists

    span.set_attribute("error.type", error_type)
    span.set_status(Status(StatusCode.ERROR, message[:200]))


def client_kind() -> trace.SpanKind:
    from opentelemetry.trace import SpanKind

    return SpanKind.CLIENT
