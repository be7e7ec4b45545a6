"""What the exporter holds of OpenTelemetry, without importing it.

Most VMs run without an OTLP endpoint: then nothing of OpenTelemetry is imported at all (the SDK was
about a third of a started exporter's memory and start-up time, the API is 0.4 MiB). ``NoTelemetry`` is
what they get; ``otel.pipeline.build_telemetry`` (imported only when a signal is configured) builds the
real one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from se_exporter.audit.records import AuditRecord
from se_exporter.durable.spool import Spool

if TYPE_CHECKING:
    from opentelemetry import trace

SHUTDOWN_SECONDS = 5.0  # SIGTERM: logs may use all of it; spans get what is left, at least 1 s


class Telemetry(Protocol):
    """A tracer provider (API type; None: spans not exported), the spool the audit trail fills (None: logs
    not exported), close()."""

    @property
    def tracer_provider(self) -> trace.TracerProvider | None: ...

    @property
    def spool(self) -> Spool[AuditRecord] | None: ...

    def close(self, timeout: float = SHUTDOWN_SECONDS) -> None: ...


@dataclass
class NoTelemetry:
    tracer_provider: trace.TracerProvider | None = None
    spool: Spool[AuditRecord] | None = None

    def close(self, timeout: float = SHUTDOWN_SECONDS) -> None:
        """Nothing to flush."""
