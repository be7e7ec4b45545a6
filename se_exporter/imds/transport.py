"""The HTTP transport to IMDS: kept-alive ``http.client`` connections and our own small request and answer.

IMDS is one plain-HTTP, link-local peer polled once a second, so every object a poll needs is built once
(``Request``: method, address, target and headers; only the deadline is new per request) and the answer
is http.client's, read raw: no general-purpose client's URL parsing, header models or streams, which
were most of an idle poll's CPU and 1.5 MiB of its memory (BENCHMARKS.md). No proxy is ever used (IMDS
rejects proxied requests), nothing is decompressed here (``imds.body`` decodes, bounded), and a
connection is reused only after an answer read to its end that the server did not ask to close. The
whole answer, status line and headers included, is bounded by the request's deadline
(``httpio.get_response``: a peer dripping its headers is a timeout, not a hang).

A POST always goes on a new connection: a POST on a kept-alive connection that turns out to be closed
would have to be sent again, and approving again is the approver's decision (after a fresh look at
the event), never the transport's.

Exceptions (the client maps them to ``IMDSTimeout`` and ``IMDSConnectionError``)::

    TransportError            the request failed before its whole answer arrived
    ├── ConnectError          no connection (refused, unreachable, reset while connecting)
    ├── ConnectTimeout        no connection within the connect timeout
    ├── ReadError             the connection failed while sending or reading
    └── ReadTimeout           the answer did not arrive before the deadline
"""

from __future__ import annotations

import http.client
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Protocol

from se_exporter.common.httpio import closed_while_idle, get_response

CHUNK_BYTES = 65536
CONNECT_TIMEOUT_SECONDS = 2.0
_Key = tuple[str, int]


class TransportError(Exception):
    """The request failed before its whole answer arrived."""


class ConnectError(TransportError):
    pass


class ConnectTimeout(TransportError):
    pass


class ReadError(TransportError):
    pass


class ReadTimeout(TransportError):
    pass


@dataclass(frozen=True, slots=True)
class Request:
    """One request to IMDS, built once per endpoint: ``target`` is the path and query."""

    method: str
    host: str
    port: int
    target: str
    headers: Mapping[str, str]
    body: bytes | None = None


class Answer:
    """A status, headers (names in lower case) and the raw body as it arrives; ``close()`` when done."""

    def __init__(
        self,
        status: int,
        headers: Mapping[str, str],
        chunks: Iterator[bytes],
        release: Callable[[], None] = lambda: None,
    ) -> None:
        self.status = status
        self.headers = headers
        self.chunks = chunks
        self._release: Callable[[], None] | None = release

    def close(self) -> None:
        if self._release is not None:
            release, self._release = self._release, None
            release()


class Transport(Protocol):
    """What the IMDS client sends through (tests and benchmarks pass their own)."""

    def send(self, request: Request, deadline: float) -> Answer:
        """The answer's status and headers, its body to be read by ``deadline`` (a ``time.monotonic``)."""

    def close(self) -> None: ...


class IMDSTransport:
    """Thread-safe: a request takes an idle connection (or opens one) and gives it back when its answer
    is closed, so the poll loop and the approver's POSTs never share one mid-answer."""

    def __init__(self, connect_timeout: float = CONNECT_TIMEOUT_SECONDS) -> None:
        self._connect_timeout = connect_timeout
        self._lock = threading.Lock()
        self._idle: dict[_Key, list[http.client.HTTPConnection]] = {}
        self._closed = False

    def send(self, request: Request, deadline: float) -> Answer:
        key = (request.host, request.port)
        connection, reused = self._take(key, fresh=request.method != "GET")
        try:
            answer = self._send(connection, request, deadline, reused=reused)
        except _Stale:  # a kept-alive connection the server closed while it was idle: once more, on a new one
            connection = http.client.HTTPConnection(*key, timeout=self._connect_timeout)
            answer = self._send(connection, request, deadline, reused=False)
        body = _Body(answer)
        return Answer(
            answer.status,
            {name.lower(): value for name, value in answer.getheaders()},
            iter(body),
            lambda: self._give_back(key, connection, body.close()),
        )

    @staticmethod
    def _send(
        connection: http.client.HTTPConnection, request: Request, deadline: float, *, reused: bool
    ) -> http.client.HTTPResponse:
        """One request; raises this module's exceptions, or ``_Stale`` when a reused connection was gone."""
        connected = connection.sock is not None
        try:
            if not connected:
                connection.connect()
                connected = True
            connection.sock.settimeout(max(0.001, deadline - time.monotonic()))  # sendall: a total bound
            connection.request(request.method, request.target, body=request.body, headers=request.headers)
            return get_response(connection, deadline)
        except TimeoutError as error:
            connection.close()
            raise (ReadTimeout if connected else ConnectTimeout)(str(error)) from None
        except (OSError, http.client.HTTPException) as error:
            connection.close()
            if reused and closed_while_idle(error):
                raise _Stale from None
            problem = f"{type(error).__name__}: {error}"
            raise (ReadError(problem) if connected else ConnectError(problem)) from None

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle = [connection for connections in self._idle.values() for connection in connections]
            self._idle.clear()
        for connection in idle:
            connection.close()

    def _take(self, key: _Key, *, fresh: bool) -> tuple[http.client.HTTPConnection, bool]:
        with self._lock:
            if self._idle.get(key) and not fresh:
                return self._idle[key].pop(), True
        return http.client.HTTPConnection(*key, timeout=self._connect_timeout), False

    def _give_back(self, key: _Key, connection: http.client.HTTPConnection, reusable: bool) -> None:
        with self._lock:
            if reusable and not self._closed:
                self._idle.setdefault(key, []).append(connection)
                return
        connection.close()


class _Stale(Exception):
    pass


class _Body:
    """The raw body as it arrives; ``close()`` says whether the connection may carry another request."""

    def __init__(self, answer: http.client.HTTPResponse) -> None:
        self._answer = answer
        self._reusable: bool | None = None

    def __iter__(self) -> Iterator[bytes]:
        try:
            while chunk := self._answer.read1(CHUNK_BYTES):
                yield chunk
        except TimeoutError as error:
            raise ReadTimeout(str(error)) from None
        except (OSError, http.client.HTTPException) as error:
            raise ReadError(f"{type(error).__name__}: {error}") from None

    def close(self) -> bool:
        if self._reusable is None:
            # Read to its end (all of Content-Length, or a chunked body's last chunk, after which http.client
            # closes it) and not to be closed by the server: the connection can carry the next request.
            complete = self._answer.isclosed() or self._answer.length == 0
            self._reusable = complete and not self._answer.will_close
            self._answer.close()
        return self._reusable
