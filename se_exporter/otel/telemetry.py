"""What the exporter holds of OpenTelemetry, without importing the SDK.

Most VMs run without an OTLP endpoint: then nothing of the SDK is imported at all (it is about a
third of a started exporter's memory and start-up time). ``NoTelemetry`` is what they get;
``otel.pipeline.build_telemetry`` (imported only when a signal is configured) builds the real one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from opentelemetry import trace

from se_exporter.audit.spool import Spool

SHUTDOWN_SECONDS = 5.0  # SIGTERM: logs may use all of it; spans get what is left, at least 1 s


class Telemetry(Protocol):
    """A tracer provider (API type), the spool the audit trail fills (None: logs not exported), close()."""

    @property
    def tracer_provider(self) -> trace.TracerProvider: ...

    @property
    def spool(self) -> Spool | None: ...

    def close(self, timeout: float = SHUTDOWN_SECONDS) -> None: ...


@dataclass
class NoTelemetry:
    tracer_provider: trace.TracerProvider = field(default_factory=trace.NoOpTracerProvider)
    spool: Spool | None = None

    def close(self, timeout: float = SHUTDOWN_SECONDS) -> None:
        """Nothing to flush."""
