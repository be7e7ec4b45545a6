"""OTLP/HTTP requests (binary protobuf) on a kept-alive ``http.client`` connection.

The SDK's OTLP/HTTP exporters send through ``requests``: about 6 MiB of a started exporter's memory
(a sixth of it) and most of an export's CPU, for one POST every few seconds to one collector. This
sends the same request (``POST`` of ``application/x-protobuf``, the configured headers, gzip or
deflate, TLS with the configured CA and client certificate, through ``HTTPS_PROXY``/``HTTP_PROXY``
unless ``NO_PROXY`` says otherwise) on one persistent connection. The bytes come from the SDK's own
encoders (``otel/pipeline.py``). Nothing is retried here but a kept-alive connection that the
collector closed while idle: the log shipper and the span exporter's pause decide when to try again.
"""

from __future__ import annotations

import contextlib
import gzip
import http.client
import logging
import socket
import ssl
import threading
import urllib.parse
import zlib
from collections.abc import Callable

from se_exporter.errors import ConfigError
from se_exporter.httpio import closed_while_idle
from se_exporter.otel.config import SignalConfig

log = logging.getLogger(__name__)
MAX_ANSWER_BYTES = 1 << 16  # a collector's answer is a small protobuf (a partial-success count)
_COMPRESS: dict[str, Callable[[bytes], bytes]] = {"gzip": gzip.compress, "deflate": zlib.compress}


class OTLPHttpClient:
    """One signal's endpoint. Thread-safe; ``close()`` from another thread makes a send give up."""

    def __init__(self, signal: SignalConfig, user_agent: str) -> None:
        url = urllib.parse.urlsplit(signal.endpoint)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ConfigError(f"OTLP endpoint {signal.endpoint!r}: an http:// or https:// URL is needed")
        self._target = (url.hostname, url.port or (443 if url.scheme == "https" else 80))
        self._path = urllib.parse.urlunsplit(("", "", url.path or "/", url.query, ""))
        self._tls = _tls_context(signal) if url.scheme == "https" else None
        self._proxy = _proxy_address(signal.proxy) if signal.proxy else None
        if self._proxy is not None and self._tls is None:  # plain HTTP through a proxy: the absolute URL
            self._path = urllib.parse.urlunsplit(("http", url.netloc, url.path or "/", url.query, ""))
        self._headers = {"Content-Type": "application/x-protobuf", "User-Agent": user_agent, **signal.headers}
        self._compress = _COMPRESS.get(signal.compression)
        if self._compress is not None:
            self._headers["Content-Encoding"] = signal.compression
        self._timeout = signal.timeout
        self._lock = threading.Lock()
        self._connection: http.client.HTTPConnection | None = None
        self._closed = False

    def post(self, body: bytes) -> bool:
        """True when the collector answered 2xx; a failure is logged at debug (the callers report outages)."""
        data = self._compress(body) if self._compress is not None else body
        with self._lock:
            reused = self._connection is not None
            while not self._closed:
                connection = self._connection or self._connect()
                try:
                    connection.request("POST", self._path, body=data, headers=self._headers)
                    answer = connection.getresponse()
                    answer.read(MAX_ANSWER_BYTES)
                except (OSError, http.client.HTTPException) as error:
                    self._drop()
                    # A kept-alive connection the collector closed while idle: once more, on a new one. Not
                    # after a timeout (the collector may have the request) nor after close().
                    if reused and closed_while_idle(error) and not self._closed:
                        reused = False
                        continue
                    log.debug("OTLP/HTTP POST to %s failed: %s", self._path, error)
                    return False
                if answer.will_close or not answer.isclosed():
                    self._drop()  # asked to close, or more answer than we read: not reusable
                accepted = 200 <= answer.status < 300
                if not accepted:
                    log.debug("OTLP/HTTP POST to %s answered %d %s", self._path, answer.status, answer.reason)
                return accepted
            return False

    def close(self) -> None:
        """End the connection now, also under a send in progress, which then fails at once (a close()
        alone would leave a thread blocked in recv() waiting for its timeout); nothing is sent after."""
        self._closed = True
        connection = self._connection
        if connection is not None and connection.sock is not None:
            with contextlib.suppress(OSError):
                connection.sock.shutdown(socket.SHUT_RDWR)

    def _connect(self) -> http.client.HTTPConnection:
        host, port = self._proxy or self._target
        connection: http.client.HTTPConnection
        if self._tls is not None:
            connection = http.client.HTTPSConnection(host, port, timeout=self._timeout, context=self._tls)
        else:
            connection = http.client.HTTPConnection(host, port, timeout=self._timeout)
        if self._proxy is not None and self._tls is not None:
            connection.set_tunnel(*self._target)  # CONNECT through the proxy, then TLS with the collector
        self._connection = connection
        return connection

    def _drop(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None


def _tls_context(signal: SignalConfig) -> ssl.SSLContext:
    try:
        context = ssl.create_default_context(cafile=signal.certificate)
        if signal.client_certificate:
            context.load_cert_chain(signal.client_certificate, signal.client_key)
    except (OSError, ssl.SSLError) as error:
        raise ConfigError(f"OTEL_EXPORTER_OTLP_*CERTIFICATE/CLIENT_KEY: {error}") from None
    return context


def _proxy_address(proxy: str) -> tuple[str, int]:
    url = urllib.parse.urlsplit(proxy if "://" in proxy else f"http://{proxy}")
    if url.scheme != "http" or not url.hostname:
        raise ConfigError(f"proxy {proxy!r} for the OTLP endpoint: an http:// proxy URL is needed")
    return url.hostname, url.port or 80
