"""One total deadline for an HTTP request (to IMDS, or the image's health check), which httpx lacks: httpx
bounds each read by its ``read`` timeout, never their sum, so a peer dripping its status line, its
headers, endless ``100 Continue`` answers, a chunk-size line or trailers one byte a second holds a request
for ever, since every read succeeds.

httpcore's network backend (its documented extension point, ``httpcore.NetworkBackend``) is where every
connect, TLS handshake, read and write happens, so each is given at most the time left until the deadline
of the request on this thread (``within``), and one that would start past it fails at once as a timeout.
httpx's own transport is kept for the rest (its request and answer models, its pool and its exception
tree); httpx offers no parameter for the backend yet (encode/httpx#3749), so ``deadline_transport`` hands
its pool one.
"""

from __future__ import annotations

import contextlib
import ssl
import time
from collections.abc import Iterable, Iterator
from contextvars import ContextVar
from typing import Any

import httpcore
import httpx

from se_exporter.errors import TOO_SLOW

_DEADLINE: ContextVar[float | None] = ContextVar("se_exporter_http_deadline", default=None)


@contextlib.contextmanager
def within(deadline: float) -> Iterator[None]:
    """Every connect, read and write of this thread's requests ends by ``deadline`` (a ``time.monotonic``)."""
    token = _DEADLINE.set(deadline)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def _time_left(timeout: float | None, error: type[Exception]) -> float | None:
    """``timeout``, cut to the time left before this thread's deadline; ``error`` once it has passed."""
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


def deadline_transport(limits: httpx.Limits, *, tls: ssl.SSLContext | None = None) -> httpx.HTTPTransport:
    """httpx's transport (no proxy, no retries), its pool's every socket call within the deadline. ``tls``:
    the context of https requests (IMDS is plain HTTP: none, so no CA bundle is loaded for nothing)."""
    transport = httpx.HTTPTransport(verify=False, trust_env=False, limits=limits, retries=0)  # its pool is replaced
    transport._pool = httpcore.ConnectionPool(
        ssl_context=tls,
        max_connections=limits.max_connections,
        max_keepalive_connections=limits.max_keepalive_connections,
        keepalive_expiry=limits.keepalive_expiry,
        network_backend=DeadlineBackend(),
    )
    return transport


def root_cause(error: BaseException) -> BaseException:
    """What failed underneath httpx's exception (the socket's ``ConnectionRefusedError``, OpenSSL's alert)."""
    while (under := error.__cause__ or error.__context__) is not None:  # httpcore's pool re-raises "from None"
        error = under
    return error
