"""TLS for the web server: the handshake in the connection's thread, and certificate reload."""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import ssl
import threading
import time
from collections.abc import Iterable
from pathlib import Path

from se_exporter.errors import ConfigError
from se_exporter.web.tls_config import TLSServerConfig

log = logging.getLogger(__name__)

HANDSHAKE_TIMEOUT_SECONDS = 10.0  # a client that has not finished the TLS handshake by then is dropped
CERT_RELOAD_CHECK_SECONDS = 1.0  # how often (at most, on new connections) certificate files are checked


class TLSAcceptor:
    """Wraps accepted sockets for TLS; the handshake runs later, in the connection's own thread.

    Certificate rotation: on a new connection, at most every ``CERT_RELOAD_CHECK_SECONDS``, the
    certificate, key and client CA files are stat()ed; if one changed the context is rebuilt. A broken
    new set is logged and the previous context kept, so a half-written renewal never takes the port down.
    """

    def __init__(self, config: TLSServerConfig, handshake_timeout: float) -> None:
        self.config = config
        self.handshake_timeout = handshake_timeout
        self._stamp = _stamp(config.files)
        self._context = config.ssl_context()
        self._checked = time.monotonic()
        self._lock = threading.Lock()

    def context(self) -> ssl.SSLContext:
        now = time.monotonic()
        with self._lock:
            if now - self._checked >= CERT_RELOAD_CHECK_SECONDS:
                self._checked = now
                stamp = _stamp(self.config.files)
                if stamp != self._stamp:
                    self._stamp = stamp
                    try:
                        self._context = self.config.ssl_context()
                    except ConfigError as exc:
                        log.error("TLS files changed but cannot be used; keeping the previous certificate",
                                  extra={"err": str(exc)})
                    else:
                        log.info("TLS certificate reloaded", extra={"cert_file": str(self.config.cert_file)})
            return self._context

    def wrap(self, sock: socket.socket) -> ssl.SSLSocket:
        return self.context().wrap_socket(sock, server_side=True, do_handshake_on_connect=False)

    def handshake(self, conn: ssl.SSLSocket, client: str) -> bool:
        """Complete the handshake (bounded by ``handshake_timeout``); False: drop the connection."""
        conn.settimeout(self.handshake_timeout)
        try:
            conn.do_handshake()
        except ssl.SSLError as exc:
            if exc.reason == "HTTP_REQUEST":
                _answer_plain_http(conn)
            log.debug("TLS handshake failed", extra={"client": client, "err": str(exc)})
            return False
        except OSError as exc:  # timeout, reset, EOF
            log.debug("TLS handshake failed", extra={"client": client, "err": str(exc) or type(exc).__name__})
            return False
        if not self.config.allows_peer(conn.getpeercert()):
            log.warning("client certificate has none of client_allowed_sans; connection closed",
                        extra={"client": client})
            return False
        return True


def _stamp(files: Iterable[Path]) -> tuple[tuple[int, ...] | None, ...]:
    stamps: list[tuple[int, ...] | None] = []
    for path in files:
        try:
            st = os.stat(path)
        except OSError:
            stamps.append(None)
        else:
            stamps.append((st.st_mtime_ns, st.st_size, st.st_ino, st.st_dev))
    return tuple(stamps)


def _answer_plain_http(conn: ssl.SSLSocket) -> None:
    """Tell a plain-HTTP client what went wrong, in cleartext, as Go's net/http does."""
    body = b"Client sent an HTTP request to an HTTPS server.\n"
    head = b"HTTP/1.0 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n"
    with contextlib.suppress(OSError):
        socket.socket.sendall(conn, head + b"Content-Length: %d\r\n\r\n" % len(body) + body)  # not via TLS
