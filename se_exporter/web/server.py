"""The threaded HTTP server: plain or TLS, sleeping until a client connects, stopped at once."""

from __future__ import annotations

import logging
import selectors
import socket
import ssl
import sys
import threading
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server
from wsgiref.types import WSGIApplication

from se_exporter.web.auth import protect
from se_exporter.web.config import WebConfig
from se_exporter.web.tls import HANDSHAKE_TIMEOUT_SECONDS, TLSAcceptor

log = logging.getLogger(__name__)

REQUEST_TIMEOUT_SECONDS = 30.0  # idle time allowed on a connection while reading a request or sending


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    allow_reuse_address = True
    tls: TLSAcceptor | None = None

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, address = super().get_request()
        if self.tls is not None:
            try:
                return self.tls.wrap(sock), address  # no I/O here: the accept loop never waits on a client
            except (OSError, ValueError):
                sock.close()
                raise OSError("cannot wrap the connection for TLS") from None
        return sock, address

    def finish_request(self, request: Any, client_address: Any) -> None:
        # Runs in the connection's thread (ThreadingMixIn), so a slow handshake only holds that thread.
        tls, client = self.tls, _client(client_address)
        if tls is not None and isinstance(request, ssl.SSLSocket) and not tls.handshake(request, client):
            return
        super().finish_request(request, client_address)

    def handle_error(self, request: Any, client_address: Any) -> None:
        error = sys.exc_info()[1]
        if isinstance(error, OSError):  # timeouts, resets, TLS errors: the client's problem, not ours
            log.debug("connection ended", extra={"client": _client(client_address), "err": str(error)})
        else:
            log.error("error serving a request", extra={"client": _client(client_address)}, exc_info=True)


def _client(address: Any) -> str:
    return str(address[0]) if isinstance(address, tuple) and address else str(address)


class _DualStackServer(_ThreadingServer):
    address_family = socket.AF_INET6

    def server_bind(self) -> None:
        self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)  # IPv4 too, like Go's ":port"
        super().server_bind()


class _QuietHandler(WSGIRequestHandler):
    timeout = REQUEST_TIMEOUT_SECONDS  # a client that stalls mid-request frees its thread

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)


class WebServer:
    """Serves ``app`` on a background thread; ``port`` is the bound port (useful with port 0).

    ``web_config`` (from ``load_web_config``, ``--web.config.file``) adds TLS, basic auth on every path
    and extra response headers; None serves plain HTTP as before. ``scheme`` is "https" or "http".
    """

    def __init__(
        self,
        app: WSGIApplication,
        host: str,
        port: int,
        web_config: WebConfig | None = None,
        *,
        handshake_timeout: float = HANDSHAKE_TIMEOUT_SECONDS,
    ) -> None:
        config = web_config or WebConfig()
        tls = TLSAcceptor(config.tls, handshake_timeout) if config.tls else None
        self._server = _bind(protect(app, config), host, port)
        self._server.tls = tls
        self.port: int = self._server.server_address[1]
        self.scheme: str = config.scheme
        self._server.timeout = 0  # handle_request() only after select() said a connection waits
        self._wake, self._woken = socket.socketpair()
        self._thread = threading.Thread(target=self._accept_loop, name="web", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._wake.send(b"\0")
        if self._thread.is_alive():
            self._thread.join(timeout=5.0)
        self._server.server_close()
        self._wake.close()
        self._woken.close()

    def _accept_loop(self) -> None:
        # Unlike serve_forever(), which wakes every 0.5 s to look for a shutdown request, this sleeps
        # until a client connects or stop() writes to the wake-up socket: an idle exporter stays asleep.
        with selectors.DefaultSelector() as selector:
            selector.register(self._server, selectors.EVENT_READ)
            selector.register(self._woken, selectors.EVENT_READ)
            while all(key.fileobj is self._server for key, _ in selector.select()):
                self._server.handle_request()


def _bind(app: WSGIApplication, host: str, port: int) -> _ThreadingServer:
    if host in ("", "::") and socket.has_ipv6:
        try:
            return make_server("::", port, app, server_class=_DualStackServer, handler_class=_QuietHandler)
        except OSError:
            if host == "::":
                raise
    server_class: type[_ThreadingServer] = _ThreadingServer
    if ":" in host:
        server_class = type("_V6Server", (_ThreadingServer,), {"address_family": socket.AF_INET6})
    return make_server(host or "0.0.0.0", port, app, server_class=server_class, handler_class=_QuietHandler)
