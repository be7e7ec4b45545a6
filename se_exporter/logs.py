"""Process logging to stderr in logfmt (default) or JSON, node_exporter style.

How the OpenTelemetry SDK's own log lines reach ours (no SDK import: it is a logging concern).

The SDK logs every failed OTLP attempt and every retry (an error line every few seconds while a
collector is down). se-exporter reports an outage itself, once when it starts and once when it
ends (the log shipper for records, the span exporter for spans), so those lines go to debug. Every
other SDK warning (a batch dropped as too large, a bad configuration) stays a warning.
"""

from __future__ import annotations

import functools
import json
import logging
import re
import sys
from datetime import UTC, datetime
from typing import Any, TextIO

LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING, "error": logging.ERROR}

FORMATS = ("logfmt", "json")

_NEEDS_QUOTES = re.compile(r'[ ="\\]')  # a bare logfmt value cannot hold these

_BARE_ASCII = re.compile(r"[!#-<>-\[\]-~]+")  # printable ASCII but for those: bare, no further check

_LEVEL_NAMES = {logging.DEBUG: "debug", logging.INFO: "info", logging.WARNING: "warn", logging.ERROR: "error"}


# ``extra={FIELDS: (summary, details...)}`` hands a line's fields over as mappings, in order: for lines
# with many fields (the audit trail's), cheaper than one record attribute each. A logfmt line at info
# shows the summary only (one event, one short line); at debug, and in JSON, every field.
FIELDS = "se_fields"


_MEMO_TEXTS, _MEMO_TEXT_CHARS = 4096, 200


_RESERVED = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


def fields_of(record: logging.LogRecord, details: bool = True) -> dict[str, Any]:
    """The record as ordered key/values: ts, level, logger, msg, then structured extras (``details``: all
    of them, else the summary of a line made with ``FIELDS``)."""
    fields: dict[str, Any] = {
        "ts": _timestamp(record.created),
        "level": _LEVEL_NAMES.get(record.levelno) or record.levelname.lower().replace("warning", "warn"),
        "logger": record.name,
        "msg": record.getMessage(),
    }
    structured = getattr(record, FIELDS, None)
    if structured is not None:
        for part in structured if details else structured[:1]:
            fields.update(part)
    else:
        fields.update({k: v for k, v in vars(record).items() if k not in _RESERVED and not k.startswith("_")})
    if record.exc_info:
        fields["exc"] = logging.Formatter().formatException(record.exc_info)
    return fields


class LogfmtFormatter(logging.Formatter):
    def __init__(self, details: bool = True) -> None:
        super().__init__()
        self._details = details
        # Most key=value pairs recur line after line (types, statuses, descriptions, the logger): each
        # is written once. Bounded; a clear now and then costs a few pairs written again.
        self._pairs: dict[tuple[str, str], str] = {}

    def format(self, record: logging.LogRecord) -> str:
        pairs, written = self._pairs, []
        for pair in fields_of(record, self._details).items():
            key, value = pair
            if not isinstance(value, str) or len(value) > _MEMO_TEXT_CHARS:  # str enums too
                written.append(f"{key}={_logfmt_value(value)}")
                continue
            text = pairs.get(pair)
            if text is None:
                if len(pairs) >= _MEMO_TEXTS:
                    pairs.clear()
                text = pairs[pair] = f"{key}={_logfmt_value(value)}"
            written.append(text)
        return " ".join(written)


class JSONFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return visible(json.dumps(fields_of(record), default=str, ensure_ascii=False))


def _logfmt_value(value: Any) -> str:
    # The audit trail writes a line of about 20 values per transition (1,000 at once when a scale set's
    # document first lists them): plain text and numbers take the short paths.
    kind = type(value)
    text: str
    if kind is str:
        text = value
    elif kind is int or kind is float:
        return str(value)
    elif kind is bool:
        return "true" if value else "false"
    elif isinstance(value, list | tuple):
        text = ",".join(map(str, value))
    else:
        text = str(value)
    if _BARE_ASCII.fullmatch(text):
        return text
    # isprintable() rules out newlines, tabs and other control characters.
    if text.isprintable():
        if text and _NEEDS_QUOTES.search(text) is None:
            return text
        if '"' not in text and "\\" not in text:
            return f'"{text}"'  # what JSON would write: nothing in it needs an escape
    return visible(json.dumps(text, ensure_ascii=False))


def visible(encoded: str) -> str:
    """JSON text with every character that is not printable escaped (JSON leaves NEL, the line and paragraph
    separators, bidirectional overrides and the BOM as they are: a terminal or a log shipper would act on
    them). Outside JSON strings there are none, so the result is the same JSON, one visible line."""
    if encoded.isprintable():
        return encoded
    return "".join(char if char.isprintable() else _escaped(char) for char in encoded)


def _escaped(char: str) -> str:
    code = ord(char)
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


@functools.lru_cache(maxsize=4)  # the lines of one poll share their second
def _second(seconds: int) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S")


def _timestamp(created: float) -> str:
    """As ``isoformat(timespec="milliseconds")`` of the UTC time, with a Z: microseconds rounded, then cut."""
    seconds = int(created)
    micros = round((created - seconds) * 1_000_000)
    if micros >= 1_000_000:
        seconds, micros = seconds + 1, micros - 1_000_000
    return f"{_second(seconds)}.{micros // 1000:03d}Z"


def configure(level: str, fmt: str, stream: TextIO | None = None) -> logging.Handler:
    """Route the se_exporter loggers to ``stream`` (stderr); returns the handler it installed."""
    handler = logging.StreamHandler(stream or sys.stderr)
    # On a terminal (logfmt), one event is one short line; its every field at debug level, or in JSON.
    handler.setFormatter(JSONFormatter() if fmt == "json" else LogfmtFormatter(details=level == "debug"))
    root = logging.getLogger("se_exporter")
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(LEVELS[level])
    root.propagate = False
    return handler


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
