"""Process logging to stderr in logfmt (default) or JSON, node_exporter style."""

from __future__ import annotations

import json
import logging
import re
import sys
from datetime import UTC, datetime
from typing import Any, TextIO

LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING, "error": logging.ERROR}
FORMATS = ("logfmt", "json")
_NEEDS_QUOTES = re.compile(r'[ ="\\]')  # a bare logfmt value cannot hold these
_RESERVED = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


def fields_of(record: logging.LogRecord) -> dict[str, Any]:
    """The record as ordered key/values: ts, level, logger, msg, then structured extras."""
    fields: dict[str, Any] = {
        "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "level": record.levelname.lower().replace("warning", "warn"),
        "logger": record.name,
        "msg": record.getMessage(),
    }
    fields.update({k: v for k, v in vars(record).items() if k not in _RESERVED and not k.startswith("_")})
    if record.exc_info:
        fields["exc"] = logging.Formatter().formatException(record.exc_info)
    return fields


class LogfmtFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return " ".join(f"{key}={_logfmt_value(value)}" for key, value in fields_of(record).items())


class JSONFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return json.dumps(fields_of(record), default=str, ensure_ascii=False)


def _logfmt_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        value = ",".join(map(str, value))
    text = str(value)
    # isprintable() already rules out newlines, tabs and other control characters.
    if text and text.isprintable() and _NEEDS_QUOTES.search(text) is None:
        return text
    return json.dumps(text, ensure_ascii=False)


def configure(level: str, fmt: str, stream: TextIO | None = None) -> logging.Handler:
    """Route the se_exporter loggers to ``stream`` (stderr); returns the handler it installed."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JSONFormatter() if fmt == "json" else LogfmtFormatter())
    root = logging.getLogger("se_exporter")
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(LEVELS[level])
    root.propagate = False
    return handler
