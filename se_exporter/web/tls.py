"""TLS for the web server: the context of each new connection (certificates reloaded when they change), the
handshake (a refused client is told why, by a TLS alert), and what a plain-HTTP client on the TLS port is
told."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
import threading
import time
from asyncio import sslproto
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from se_exporter.config.files import FileStamp, stamp
from se_exporter.errors import ConfigError
from se_exporter.web.live_config import LiveWebConfig
from se_exporter.web.tls_config import TLSServerConfig

log = logging.getLogger(__name__)

HANDSHAKE_TIMEOUT_SECONDS = 10.0  # a client that has not finished the TLS handshake by then is dropped
CERT_RELOAD_CHECK_SECONDS = 1.0  # how often (at most, on new connections) certificate files are checked


class TLSAcceptor:
    """The TLS context for each new connection (the server's event loop runs the handshake).

    Certificate rotation: on a new connection, at most every ``CERT_RELOAD_CHECK_SECONDS``, the
    certificate, key and client CA files are stat()ed; if one changed the context is rebuilt. A broken
    new set is logged and the previous context kept, so a half-written renewal never takes the port down.
    The TLS settings themselves follow the web config in force (``live``): a changed ``tls_server_config``
    rebuilds the context too; while the file does not parse, handshakes go on with the last one (every
    request is then refused, ``web/exchange.py``).
    """

    def __init__(self, config: TLSServerConfig, handshake_timeout: float, live: LiveWebConfig | None = None) -> None:
        self.config = config
        self.handshake_timeout = handshake_timeout
        self._live = live
        self._stamp = _stamps(config.files)
        self._context = config.ssl_context()
        self._checked = time.monotonic()
        self._lock = threading.Lock()

    def context(self) -> ssl.SSLContext:
        now = time.monotonic()
        in_force = self._live.current() if self._live is not None else None
        with self._lock:
            settings = in_force.tls if in_force is not None else None
            settings_changed = False
            if settings is not None and settings != self.config:
                self.config, settings_changed = settings, True
            if settings_changed or now - self._checked >= CERT_RELOAD_CHECK_SECONDS:
                self._checked = now
                files = _stamps(self.config.files)
                if settings_changed or files != self._stamp:
                    self._stamp = files
                    try:
                        self._context = self.config.ssl_context()
                    except ConfigError as exc:
                        log.error(
                            "TLS files changed but cannot be used; keeping the previous certificate",
                            extra={"err": str(exc)},
                        )
                    else:
                        log.info("TLS context reloaded", extra={"cert_file": str(self.config.cert_file or "inline")})
            return self._context


class _AlertingSSLProtocol(sslproto.SSLProtocol):
    """asyncio's TLS protocol, sending the alert of a failed handshake before the connection closes.

    asyncio drops what OpenSSL wrote when the handshake fails (the alert that says why: protocol version, no
    shared cipher, unknown CA), so the client reads EOF where Go's client says "protocol version not
    supported". The alert is written out first. ``_on_handshake_complete`` and ``_process_outgoing`` are
    asyncio's private methods (no public hook exists), pinned by tests/web/test_tls_alerts.py.
    """

    def _on_handshake_complete(self, handshake_exc: BaseException | None) -> None:
        if handshake_exc is not None:
            with contextlib.suppress(Exception):
                self._process_outgoing()  # type: ignore[attr-defined]
        super()._on_handshake_complete(handshake_exc)


class _Connected(asyncio.StreamReaderProtocol):
    """The stream protocol, keeping the TLS transport it is handed once the handshake succeeds."""

    transport: asyncio.BaseTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        super().connection_made(transport)


async def handshake(
    sock: socket.socket,
    reader: asyncio.StreamReader,
    context: ssl.SSLContext,
    *,
    timeout: float,
    shutdown_timeout: float,
) -> asyncio.StreamWriter:
    """The server side of the TLS handshake on ``sock``: a writer (``reader`` reads the connection), or an
    ``OSError`` once the client was told why it failed."""
    loop = asyncio.get_running_loop()
    protocol = _Connected(reader)
    waiter: asyncio.Future[Any] = loop.create_future()
    tls = _AlertingSSLProtocol(
        loop,
        protocol,
        context,
        waiter,
        server_side=True,
        ssl_handshake_timeout=timeout,  # type: ignore[arg-type]  # typeshed says int; asyncio takes seconds
        ssl_shutdown_timeout=shutdown_timeout,
    )
    raw, _ = await loop.connect_accepted_socket(lambda: tls, sock)
    try:
        await waiter
    except BaseException:
        raw.abort()
        raise
    if not isinstance(protocol.transport, asyncio.WriteTransport):
        raw.abort()
        raise ConnectionAbortedError("the TLS handshake ended without a connection")
    return asyncio.StreamWriter(protocol.transport, protocol, reader, loop)


def is_tls_hello(sock: socket.socket) -> bool:
    """Whether what the client sent first (peeked, not read) opens a TLS handshake record."""
    try:
        first = sock.recv(1, socket.MSG_PEEK)
    except (BlockingIOError, InterruptedError):
        return True  # nothing yet after all: let the handshake wait for it
    return first == b"\x16"


def answer_plain_http(sock: socket.socket) -> None:
    """Tell a plain-HTTP client what went wrong, in cleartext, as Go's net/http does."""
    body = b"Client sent an HTTP request to an HTTPS server.\n"
    head = b"HTTP/1.0 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n"
    with contextlib.suppress(OSError):
        sock.send(head + b"Content-Length: %d\r\n\r\n" % len(body) + body)  # small: fits any socket buffer


def _stamps(files: Iterable[Path]) -> tuple[FileStamp, ...]:
    return tuple(stamp(path) for path in files)
