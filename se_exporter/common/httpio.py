"""What the OTLP/HTTP client needs of ``http.client``: an answer bounded in total time (IMDS's answers are
read by ``imds/http11.py``, under the same rule and with the same words for a peer too slow).

``http.client`` bounds each socket read by the socket's timeout, never their sum: a peer that drips
its status line, its headers, endless ``100 Continue`` answers, chunk-size lines or trailers one byte
a second holds a request for ever, since every read succeeds. ``get_response`` reads the whole answer
(status, headers and body, whoever reads it later) through a reader whose every read is bounded by
the time left until one deadline; past it, a read raises ``TimeoutError``.
"""

from __future__ import annotations

import http.client
import io
import socket
import time
from collections.abc import Callable
from email.utils import parsedate_to_datetime
from typing import Any

from se_exporter.errors import TOO_SLOW

Monotonic = Callable[[], float]


class _DeadlineReader(io.RawIOBase):
    """The socket's bytes, each read bounded by the time left until ``deadline`` (on ``monotonic``)."""

    def __init__(self, sock: socket.socket, deadline: float, monotonic: Monotonic) -> None:
        super().__init__()
        self._sock = sock
        # Through makefile(), as http.client reads: the socket stays open while this reader is (a
        # "Connection: close" answer closes the connection before its body is read).
        self._raw = sock.makefile("rb", buffering=0)
        self._deadline = deadline
        self._monotonic = monotonic

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int | None:
        left = self._deadline - self._monotonic()
        if left <= 0:
            raise TimeoutError(TOO_SLOW)
        self._sock.settimeout(left)
        try:
            return self._raw.readinto(buffer)
        except TimeoutError:  # the socket waited for all the time left
            raise TimeoutError(TOO_SLOW) from None

    def close(self) -> None:
        self._raw.close()
        super().close()


class _DeadlineResponse(http.client.HTTPResponse):
    def __init__(self, sock: socket.socket, *args: Any, deadline: float, monotonic: Monotonic, **kwargs: Any) -> None:
        super().__init__(sock, *args, **kwargs)
        self.fp.close()  # the plain makefile() reader: nothing was read from it yet
        self.fp = io.BufferedReader(_DeadlineReader(sock, deadline, monotonic))


def get_response(
    connection: http.client.HTTPConnection, deadline: float, monotonic: Monotonic = time.monotonic
) -> http.client.HTTPResponse:
    """``connection.getresponse()``, the whole answer bounded by ``deadline`` (a ``monotonic`` time)."""

    def response(sock: socket.socket, *args: Any, **kwargs: Any) -> http.client.HTTPResponse:
        return _DeadlineResponse(sock, *args, deadline=deadline, monotonic=monotonic, **kwargs)

    connection.response_class = response  # type: ignore[assignment]  # http.client only calls it
    return connection.getresponse()


def closed_while_idle(error: BaseException) -> bool:
    """Whether ``error`` is what writing to, or reading from, a kept-alive connection that the peer closed
    while it was idle raises: worth one more try on a new connection (a timeout is not)."""
    return isinstance(error, ConnectionError | http.client.RemoteDisconnected)


def retry_after_seconds(value: str | None, now: float | None = None, cap: float = 3600.0) -> float | None:
    """``Retry-After`` (seconds, or an HTTP date) as seconds from now, within [0, ``cap``]; None if absent or
    unreadable. ``now`` is the Unix time an HTTP date is measured from (default: the wall clock)."""
    if not value or not (text := value.strip()):
        return None
    if text.isdigit():
        return min(float(text), cap)
    try:
        moment = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if moment.tzinfo is None:
        return None
    return max(0.0, min(moment.timestamp() - (time.time() if now is None else now), cap))


def redacted(url: str) -> str:
    """``url`` fit for a log line or an error: its user and password, if any, replaced by ``***``."""
    scheme, separator, rest = url.partition("://")
    if not separator:
        scheme, rest = "", url
    authority, slash, path = rest.partition("/")
    if "@" in authority:
        authority = "***@" + authority.rpartition("@")[2]
    return f"{scheme}{separator}{authority}{slash}{path}"
