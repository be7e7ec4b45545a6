"""The exception tree raised at se-exporter's I/O boundaries.

    SEExporterError
    ├── ConfigError                 bad flag, environment variable or file: a start-up error
    └── IMDSError                   one IMDS request failed; ``reason`` labels poll_errors_total
        ├── IMDSTimeout             connect/read/write/pool timeout          reason "timeout"
        ├── IMDSConnectionError     refused, reset, DNS, protocol error      reason "connection"
        ├── IMDSHTTPError           a non-2xx answer                         reason "http_4xx",
        │                                                                    "http_5xx", "throttled"
        │                           (1xx and 3xx, which IMDS never sends:    "invalid_document")
        ├── InvalidDocument         2xx, but not a Scheduled Events document reason "invalid_document"
        └── IMDSStopped             a GET cut short by the exporter's stop   (never counted: not a failure)

The poll loop catches ``IMDSError`` only: anything else is a bug and is allowed to surface. An error kept
past its handler is kept without its frames (``forget_traceback``). Errors say a value as the operator wrote
it (``show``) and the operating system's failures in the same words on Linux and Windows (``os_problem``,
``socket_problem``).
"""

from __future__ import annotations

import errno
import json
import os

# What a peer too slow to answer is told (imds/client.py: the IMDS client and the health check).
TOO_SLOW = "the answer did not arrive in time (a slow or dripping peer)"
BODY_KEPT = 1024  # bytes of a refusal's body an IMDSHTTPError keeps


def forget_traceback(error: BaseException) -> None:
    """Drop what an error holds beyond its message: the tracebacks of it and of the errors that led to it,
    whose frames keep their locals alive as long as the error is kept. A connection's error kept its reader,
    writer and transport (a reference cycle through asyncio's reader; with TLS each such connection kept a
    256 KiB read buffer: 250 clients that reset took 60 MiB more each round, never given back); a refused
    IMDS document, kept by the poll loop through its pause, kept the decoded document (500,000 Resources:
    about 30 MB, and the next one came beside it)."""
    seen: set[int] = set()
    pending: BaseException | None = error
    while pending is not None and id(pending) not in seen:
        seen.add(id(pending))
        pending.__traceback__ = None
        following = pending.__cause__ or pending.__context__
        pending.__context__ = pending.__cause__ = None
        pending = following


class SEExporterError(Exception):
    """Base of every error se-exporter raises on purpose."""


class ConfigError(SEExporterError):
    """Invalid configuration; the message names the flag or key and the problem."""


class IMDSError(SEExporterError):
    """A request to the Instance Metadata Service failed."""

    reason = "connection"

    @property
    def retryable(self) -> bool:
        return True


class IMDSTimeout(IMDSError):
    reason = "timeout"


class IMDSConnectionError(IMDSError):
    reason = "connection"


class IMDSHTTPError(IMDSError):
    """IMDS answered with a status outside 2xx."""

    def __init__(self, status_code: int, message: str, body: bytes = b"") -> None:
        super().__init__(message)
        self.status_code = status_code
        self.body = body[:BODY_KEPT]  # the start of IMDS's answer, as it came (what IMDS says it refused)

    @property
    def reason(self) -> str:  # type: ignore[override]
        if self.status_code == 429:
            return "throttled"
        if self.status_code >= 500:
            return "http_5xx"
        # A redirect or an informational answer is not IMDS speaking (redirects are never followed).
        return "http_4xx" if 400 <= self.status_code < 500 else "invalid_document"

    @property
    def retryable(self) -> bool:
        # IMDS documents 410 (retry up to 70 s), 429 and 5xx as transient; any other 4xx (400: missing
        # Metadata header or api-version) will fail the same way again. 1xx and 3xx: something in between
        # misbehaved; worth another try at the usual pace.
        return self.status_code in (410, 429) or not 400 <= self.status_code < 500


class InvalidDocument(IMDSError):
    """The body is not a valid Scheduled Events document; no state is changed."""

    reason = "invalid_document"


class IMDSStopped(IMDSError):
    """A GET ended early because the exporter is stopping: IMDS did nothing wrong, nothing is recorded."""

    reason = "stopped"


def show(value: object) -> str:
    """A value as the operator wrote it (JSON-ish), bounded, with its YAML type when that is the surprise."""
    if isinstance(value, bool):
        return f"{json.dumps(value)} (a boolean)"
    try:
        text = json.dumps(value, default=str)
    except (TypeError, ValueError):
        text = repr(value)
    except RecursionError:  # nested deeper than json (and repr) can walk
        text = f"<a {type(value).__name__} nested too deeply to show>"
    return text if len(text) <= 80 else text[:77] + "..."


# What goes wrong binding a port, in the same words on every platform: Windows reports its own (WSAEADDRINUSE:
# "Only one usage of each socket address ... is normally permitted"), which os.strerror() does not know.
_SOCKET_PROBLEMS = {
    errno.EADDRINUSE: "Address already in use",
    errno.EADDRNOTAVAIL: "Cannot assign requested address",
    errno.EACCES: "Permission denied",
    getattr(errno, "WSAEACCES", errno.EACCES): "Permission denied",
}


def socket_problem(exc: OSError) -> str:
    """The words for a port that cannot be listened on, one line, the same on Linux and Windows."""
    return _SOCKET_PROBLEMS.get(exc.errno or 0) or os_problem(exc)


def os_problem(exc: Exception) -> str:
    """The operating system's words for a failed file access ("No such file or directory"), the C library's
    on Windows too (where os.stat's own would say "The system cannot find the file specified")."""
    if not isinstance(exc, OSError):
        return str(exc)
    if getattr(exc, "winerror", None) and exc.errno and exc.errno in errno.errorcode:
        return os.strerror(exc.errno)
    return exc.strerror or str(exc)
