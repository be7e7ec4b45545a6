"""How the OpenTelemetry SDK's own log lines reach ours (no SDK import: it is a logging concern).

The SDK logs every failed OTLP attempt and every retry (an error line every few seconds while a
collector is down). se-exporter reports an outage itself, once when it starts and once when it
ends (the log shipper for records, the span exporter for spans), so those lines go to debug. Every
other SDK warning (a batch dropped as too large, a bad configuration) stays a warning.
"""

from __future__ import annotations

import logging

SDK_LOGGER = "opentelemetry"
_RETRY_CHATTER = ("Transient error", "Failed to export", "retrying", "Shutdown in progress", "already shutdown")


class ExportRetriesToDebug(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno <= logging.ERROR and any(part in record.getMessage() for part in _RETRY_CHATTER):
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            return logging.getLogger("se_exporter").isEnabledFor(logging.DEBUG)
        return True


class _Forward(logging.Handler):
    """Hands the SDK's records (from any of its child loggers) to our handler, once filtered."""

    def __init__(self, target: logging.Handler) -> None:
        super().__init__()
        self._target = target
        self.addFilter(ExportRetriesToDebug())

    def emit(self, record: logging.LogRecord) -> None:
        self._target.handle(record)


def route_sdk_logs(handler: logging.Handler, level: int) -> None:
    """Send the SDK's warnings (and, at debug, its retries) through ``handler``, in our format."""
    sdk = logging.getLogger(SDK_LOGGER)
    sdk.handlers = [_Forward(handler)]
    sdk.setLevel(min(level, logging.WARNING))
    sdk.propagate = False
