"""The HTTP transport to IMDS: kept-alive ``http.client`` connections behind httpx's transport seam.

IMDS is one plain-HTTP, link-local peer polled once a second. httpcore's pool, h11's state machine and
its models are built for the general case and were most of an idle poll's CPU (BENCHMARKS.md);
``http.client`` over a persistent connection does the same job for a fraction. It stays an
``httpx.BaseTransport``, so the client is unchanged and the in-process benchmarks inject ``httpx.MockTransport``.
No proxy is ever used (IMDS rejects proxied requests), nothing is decompressed here (``imds.body``
decodes, bounded), and a connection is reused only after an answer read to its end that the server
did not ask to close. The whole answer, status line and headers included, is bounded by the request's
``deadline`` extension (``httpio.get_response``: a peer dripping its headers is a timeout, not a hang).

A POST always goes on a new connection: a POST on a kept-alive connection that turns out to be closed
would have to be sent again, and approving again is the approver's decision (after a fresh look at
the event), never the transport's.
"""

from __future__ import annotations

import http.client
import threading
import time
from collections.abc import Callable, Iterator

import httpx

from se_exporter.common.httpio import closed_while_idle, get_response

CHUNK_BYTES = 65536
_Key = tuple[str, int]
_Connection = http.client.HTTPConnection


class IMDSTransport(httpx.BaseTransport):
    """Thread-safe: a request takes an idle connection (or opens one) and gives it back when its body
    is closed, so the poll loop and the approver's POSTs never share one mid-answer."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: dict[_Key, list[http.client.HTTPConnection]] = {}
        self._closed = False

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.scheme != "http":
            raise httpx.UnsupportedProtocol(f"IMDS is plain HTTP, not {request.url.scheme}")
        timeouts = request.extensions.get("timeout", {})
        read = timeouts.get("read")
        deadline = request.extensions.get("deadline", time.monotonic() + (read if read is not None else 60.0))
        key = (request.url.host, request.url.port or 80)
        headers = {
            name.decode("latin-1"): value.decode("latin-1")
            for name, value in request.headers.raw
            if name.lower() not in (b"host", b"content-length")
        }
        connection, reused = self._take(key, timeouts.get("connect"), fresh=request.method != "GET")
        try:
            answer = self._send(connection, request, headers, deadline, reused=reused)
        except _Stale:  # a kept-alive connection the server closed while it was idle: once more, on a new one
            connection = http.client.HTTPConnection(*key, timeout=timeouts.get("connect"))
            answer = self._send(connection, request, headers, deadline, reused=False)
        return httpx.Response(
            answer.status,
            headers=[(name.encode("latin-1"), value.encode("latin-1")) for name, value in answer.getheaders()],
            stream=_Body(answer, lambda reusable: self._give_back(key, connection, reusable)),
        )

    @staticmethod
    def _send(
        connection: http.client.HTTPConnection,
        request: httpx.Request,
        headers: dict[str, str],
        deadline: float,
        *,
        reused: bool,
    ) -> http.client.HTTPResponse:
        """One request; raises httpx's exception types, or ``_Stale`` when a reused connection was gone."""
        connected = connection.sock is not None
        try:
            if not connected:
                connection.connect()
                connected = True
            connection.sock.settimeout(max(0.001, deadline - time.monotonic()))  # sendall: a total bound
            connection.request(
                request.method, request.url.raw_path.decode("ascii"), body=request.read() or None, headers=headers
            )
            return get_response(connection, deadline)
        except TimeoutError as error:
            connection.close()
            raise (httpx.ReadTimeout if connected else httpx.ConnectTimeout)(str(error)) from None
        except (OSError, http.client.HTTPException) as error:
            if reused and closed_while_idle(error):
                connection.close()
                raise _Stale from None
            connection.close()
            problem = f"{type(error).__name__}: {error}"
            raise (httpx.ReadError(problem) if connected else httpx.ConnectError(problem)) from None

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle = [connection for connections in self._idle.values() for connection in connections]
            self._idle.clear()
        for connection in idle:
            connection.close()

    def _take(self, key: _Key, connect_timeout: float | None, *, fresh: bool) -> tuple[_Connection, bool]:
        with self._lock:
            if self._idle.get(key) and not fresh:
                return self._idle[key].pop(), True
        return http.client.HTTPConnection(*key, timeout=connect_timeout), False

    def _give_back(self, key: _Key, connection: http.client.HTTPConnection, reusable: bool) -> None:
        with self._lock:
            if reusable and not self._closed:
                self._idle.setdefault(key, []).append(connection)
                return
        connection.close()


class _Stale(Exception):
    pass


class _Body(httpx.SyncByteStream):
    """The raw body as it arrives; ``release(reusable)`` once closed."""

    def __init__(self, answer: http.client.HTTPResponse, release: Callable[[bool], None]) -> None:
        self._answer = answer
        self._release = release
        self._released = False

    def __iter__(self) -> Iterator[bytes]:
        try:
            while chunk := self._answer.read1(CHUNK_BYTES):
                yield chunk
        except TimeoutError as error:
            raise httpx.ReadTimeout(str(error)) from None
        except (OSError, http.client.HTTPException) as error:
            raise httpx.ReadError(f"{type(error).__name__}: {error}") from None

    def close(self) -> None:
        if self._released:
            return
        self._released = True
        # Read to its end (all of Content-Length, or a chunked body's last chunk, after which http.client
        # closes it) and not to be closed by the server: the connection can carry the next request.
        complete = self._answer.isclosed() or self._answer.length == 0
        reusable = complete and not self._answer.will_close
        self._answer.close()
        self._release(reusable)
