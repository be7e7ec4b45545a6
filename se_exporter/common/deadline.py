"""One total deadline for an HTTP request (to IMDS, or the image's health check), which httpx lacks: httpx
bounds each read by its ``read`` timeout, never their sum, so a peer dripping its status line, its
headers, endless ``100 Continue`` answers, a chunk-size line or trailers one byte a second holds a request
for ever, since every read succeeds.

httpcore's network backend (its documented extension point, ``httpcore.NetworkBackend``) is where every
connect, TLS handshake, read and write happens, so each is given at most the time left until the deadline
of the request on this thread (``within``), and one that would start past it fails at once as a timeout.
A request given a stop event ends within ``STOP_CHECK_SECONDS`` of it being set: its reads wait in slices
that short, and none starts once it is set (the exporter's stop, set by another thread, so that a first
IMDS answer taking two minutes never holds up a service stop).
httpx offers no parameter for the backend (encode/httpx#3749), so ``DeadlineTransport`` is an
``httpx.BaseTransport`` (httpx's documented way to bring a transport) that owns an ``httpcore.ConnectionPool``
on that backend; httpx keeps the rest (its request and answer models, its exception tree).
"""

from __future__ import annotations

import contextlib
import ssl
import threading
import time
from collections.abc import Iterable, Iterator
from contextvars import ContextVar
from typing import Any

import httpcore
import httpx

from se_exporter.errors import TOO_SLOW

STOP_CHECK_SECONDS = 0.25  # how long a read waits before it looks at the stop event again
STOPPED = "cut short: the exporter is stopping"
_DEADLINE: ContextVar[float | None] = ContextVar("se_exporter_http_deadline", default=None)
_STOP: ContextVar[threading.Event | None] = ContextVar("se_exporter_http_stop", default=None)


@contextlib.contextmanager
def within(deadline: float, stop: threading.Event | None = None) -> Iterator[None]:
    """Every connect, read and write of this thread's requests ends by ``deadline`` (a ``time.monotonic``),
    or soon after ``stop`` is set."""
    deadline_token, stop_token = _DEADLINE.set(deadline), _STOP.set(stop)
    try:
        yield
    finally:
        _STOP.reset(stop_token)
        _DEADLINE.reset(deadline_token)


def stopping() -> bool:
    """Whether this thread's request has a stop event, set."""
    stop = _STOP.get()
    return stop is not None and stop.is_set()


def _time_left(timeout: float | None, error: type[Exception]) -> float | None:
    """``timeout``, cut to the time left before this thread's deadline; ``error`` once it has passed."""
    if stopping():
        raise error(STOPPED)
    deadline = _DEADLINE.get()
    if deadline is None:
        return timeout
    left = deadline - time.monotonic()
    if left <= 0:
        raise error(TOO_SLOW)
    return left if timeout is None else min(timeout, left)


def _past_deadline() -> bool:
    deadline = _DEADLINE.get()
    return deadline is not None and time.monotonic() >= deadline


class _DeadlineStream(httpcore.NetworkStream):
    def __init__(self, stream: httpcore.NetworkStream) -> None:
        self._stream = stream

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        if _STOP.get() is None:
            return self._read(max_bytes, timeout)
        while True:  # in slices, each followed by a look at the stop event; a slice that times out read nothing
            limit = _time_left(timeout, httpcore.ReadTimeout)
            if limit is not None and limit <= STOP_CHECK_SECONDS:
                return self._read(max_bytes, limit)
            try:
                return self._read(max_bytes, STOP_CHECK_SECONDS)
            except httpcore.ReadTimeout:
                if timeout is not None:
                    timeout -= STOP_CHECK_SECONDS

    def _read(self, max_bytes: int, timeout: float | None) -> bytes:
        try:
            return self._stream.read(max_bytes, _time_left(timeout, httpcore.ReadTimeout))
        except httpcore.ReadTimeout:
            if _past_deadline():  # it waited for all the time left: say why, as for a read never started
                raise httpcore.ReadTimeout(TOO_SLOW) from None
            raise

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        # IMDS requests are a few hundred bytes: one send, within the time left.
        self._stream.write(buffer, _time_left(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(
        self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        limit = _time_left(timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(self._stream.start_tls(ssl_context, server_hostname, limit))

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class DeadlineBackend(httpcore.NetworkBackend):
    """httpcore's own synchronous backend, each call within the time left."""

    def __init__(self) -> None:
        self._backend = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        limit = _time_left(timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(self._backend.connect_tcp(host, port, limit, local_address, socket_options))

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.NetworkStream:
        raise httpcore.UnsupportedProtocol("Unix sockets are not used")

    def sleep(self, seconds: float) -> None:
        self._backend.sleep(seconds)


# httpcore's errors as httpx's (what httpx's own transport raises for them), most specific first.
_HTTPX_ERRORS: tuple[tuple[type[Exception], type[httpx.TransportError]], ...] = (
    (httpcore.ConnectTimeout, httpx.ConnectTimeout),
    (httpcore.ReadTimeout, httpx.ReadTimeout),
    (httpcore.WriteTimeout, httpx.WriteTimeout),
    (httpcore.PoolTimeout, httpx.PoolTimeout),
    (httpcore.TimeoutException, httpx.TimeoutException),
    (httpcore.ConnectError, httpx.ConnectError),
    (httpcore.ReadError, httpx.ReadError),
    (httpcore.WriteError, httpx.WriteError),
    (httpcore.NetworkError, httpx.NetworkError),
    (httpcore.ProxyError, httpx.ProxyError),
    (httpcore.UnsupportedProtocol, httpx.UnsupportedProtocol),
    (httpcore.LocalProtocolError, httpx.LocalProtocolError),
    (httpcore.RemoteProtocolError, httpx.RemoteProtocolError),
    (httpcore.ProtocolError, httpx.ProtocolError),
)


@contextlib.contextmanager
def _as_httpx_errors() -> Iterator[None]:
    try:
        yield
    except Exception as error:
        for theirs, ours in _HTTPX_ERRORS:
            if isinstance(error, theirs):
                raise ours(str(error)) from error  # the cause stays: root_cause() reads it
        raise


class _Body(httpx.SyncByteStream):
    """An answer's body as httpcore reads it, its errors as httpx's."""

    def __init__(self, stream: Iterable[bytes]) -> None:
        self._stream = stream

    def __iter__(self) -> Iterator[bytes]:
        with _as_httpx_errors():
            yield from self._stream

    def close(self) -> None:
        close = getattr(self._stream, "close", None)
        if close is not None:
            with _as_httpx_errors():
                close()


class DeadlineTransport(httpx.BaseTransport):
    """No proxy, no retries, every socket call of its pool within the deadline. ``tls``: the context of
    https requests (IMDS is plain HTTP: none, so no CA bundle is loaded for nothing)."""

    def __init__(self, limits: httpx.Limits, *, tls: ssl.SSLContext | None = None) -> None:
        self._pool = httpcore.ConnectionPool(
            ssl_context=tls,
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=DeadlineBackend(),
        )

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        sent = httpcore.Request(
            method=request.method,
            url=httpcore.URL(scheme=url.raw_scheme, host=url.raw_host, port=url.port, target=url.raw_path),
            headers=request.headers.raw,
            content=request.stream,  # httpx's request stream iterates bytes
            extensions=request.extensions,  # the timeouts httpx put there
        )
        with _as_httpx_errors():
            answer = self._pool.handle_request(sent)
        body: Iterable[bytes] = answer.stream  # type: ignore[assignment]  # a sync pool's body iterates bytes
        return httpx.Response(
            status_code=answer.status, headers=answer.headers, stream=_Body(body), extensions=answer.extensions
        )

    def close(self) -> None:
        self._pool.close()


def root_cause(error: BaseException) -> BaseException:
    """What failed underneath httpx's exception (the socket's ``ConnectionRefusedError``, OpenSSL's alert)."""
    while (under := error.__cause__ or error.__context__) is not None:  # httpcore's pool re-raises "from None"
        error = under
    return error
