"""The HTTP transport to IMDS: kept-alive connections and our own small request and answer.

IMDS is one plain-HTTP, link-local peer polled once a second, so every object a poll needs is built once
(``Request``: its bytes on the wire; only the deadline is new per request) and the answer is read by
``imds.http11`` (the status, the headers, the raw body as it arrives), all within the request's deadline:
no general-purpose client's URL parsing, header models or streams, which were most of an idle poll's
CPU and 1.5 MiB of its memory (BENCHMARKS.md). No proxy is ever used (IMDS rejects proxied requests),
nothing is decompressed here (``imds.body`` decodes, bounded), and a connection is reused only after an
answer read to its end that the server did not ask to close.

A POST always goes on a new connection: a POST on a kept-alive connection that turns out to be closed
would have to be sent again, and approving again is the approver's decision (after a fresh look at
the event), never the transport's.

Exceptions (the client maps them to ``IMDSTimeout`` and ``IMDSConnectionError``)::

    TransportError            the request failed before its whole answer arrived
    ├── ConnectError          no connection (refused, unreachable, reset while connecting)
    ├── ConnectTimeout        no connection within the connect timeout
    ├── ReadError             the connection failed while sending or reading, or the answer is not HTTP/1.1
    └── ReadTimeout           the answer did not arrive before the deadline
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from se_exporter.imds.http11 import Closed, Exchange, ProtocolError, encode_request

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
    wire: bytes = field(init=False, repr=False, compare=False)  # the request as sent, encoded once

    def __post_init__(self) -> None:
        wire = encode_request(self.method, self.host, self.port, self.target, dict(self.headers), body=self.body)
        object.__setattr__(self, "wire", wire)


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
        self._idle: dict[_Key, list[socket.socket]] = {}
        self._closed = False

    def send(self, request: Request, deadline: float) -> Answer:
        key = (request.host, request.port)
        sock = self._take(key) if request.method == "GET" else None
        try:
            if sock is not None:
                try:
                    exchange = self._exchange(sock, request, deadline, reused=True)
                except _Stale:  # a kept-alive connection the server closed while it was idle: once more, anew
                    sock.close()
                    sock = None
            if sock is None:
                sock = self._connect(key, deadline)
                exchange = self._exchange(sock, request, deadline, reused=False)
        except TransportError:
            if sock is not None:
                sock.close()
            raise
        chunks = _read(exchange)
        connection = sock
        return Answer(
            exchange.status, exchange.headers, chunks, lambda: self._give_back(key, connection, exchange.reusable)
        )

    def _connect(self, key: _Key, deadline: float) -> socket.socket:
        timeout = max(0.001, min(self._connect_timeout, deadline - time.monotonic()))  # within the one deadline
        try:
            sock = socket.create_connection(key, timeout=timeout)
        except TimeoutError as error:
            raise ConnectTimeout(str(error) or "timed out") from None
        except OSError as error:
            raise ConnectError(f"{type(error).__name__}: {error}") from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock

    @staticmethod
    def _exchange(sock: socket.socket, request: Request, deadline: float, *, reused: bool) -> Exchange:
        """Send ``request`` and read its answer's head; raises this module's exceptions, or ``_Stale``
        when a reused connection turned out closed."""
        exchange = Exchange(sock, deadline)
        try:
            exchange.send(request.wire)
            exchange.read_head(request.method)
        except TimeoutError as error:
            raise ReadTimeout(str(error)) from None
        except Closed:
            if reused:
                raise _Stale from None
            raise ReadError("the connection closed before an answer") from None
        except ConnectionError as error:
            if reused:
                raise _Stale from None
            raise ReadError(f"{type(error).__name__}: {error}") from None
        except (OSError, ProtocolError) as error:
            raise ReadError(f"{type(error).__name__}: {error}") from None
        return exchange

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle = [sock for socks in self._idle.values() for sock in socks]
            self._idle.clear()
        for sock in idle:
            sock.close()

    def _take(self, key: _Key) -> socket.socket | None:
        with self._lock:
            return self._idle[key].pop() if self._idle.get(key) else None

    def _give_back(self, key: _Key, sock: socket.socket, reusable: bool) -> None:
        with self._lock:
            if reusable and not self._closed:
                self._idle.setdefault(key, []).append(sock)
                return
        sock.close()


class _Stale(Exception):
    pass


def _read(exchange: Exchange) -> Iterator[bytes]:
    """The raw body as it arrives, with this module's exceptions."""
    try:
        yield from exchange.body()
    except TimeoutError as error:
        raise ReadTimeout(str(error)) from None
    except (OSError, ProtocolError) as error:
        raise ReadError(f"{type(error).__name__}: {error}") from None
