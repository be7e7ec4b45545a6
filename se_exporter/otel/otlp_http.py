"""OTLP/HTTP requests (binary protobuf) on a kept-alive ``http.client`` connection.

The SDK's OTLP/HTTP exporters send through ``requests``: about 6 MiB of a started exporter's memory
and most of an export's CPU, for one POST every few seconds to one collector. This sends the same
request (``POST`` of ``application/x-protobuf``, the configured headers, gzip or deflate, TLS with the
configured CA and client certificate, through ``HTTPS_PROXY``/``HTTP_PROXY`` and their credentials
unless ``NO_PROXY`` says otherwise) on one persistent connection, and tells what became of it as the
OTLP specification sorts answers (``common/outcome.py``): partial successes read from the answer,
``Retry-After`` honoured, the whole answer bounded by the configured timeout (``httpio``). The bytes
come from the SDK's own encoders (``otel/pipeline.py``). Nothing is retried here but a kept-alive
connection that the collector closed while idle: the log shipper and the span exporter decide when.
"""

from __future__ import annotations

import base64
import contextlib
import gzip
import http.client
import logging
import socket
import ssl
import threading
import time
import urllib.parse
import zlib
from collections.abc import Callable

from se_exporter.common.httpio import closed_while_idle, get_response, redacted, retry_after_seconds
from se_exporter.common.outcome import RETRYABLE_HTTP_STATUSES, Outcome
from se_exporter.errors import ConfigError
from se_exporter.otel.config import SignalConfig
from se_exporter.otel.otlp_answers import status_message
from se_exporter.platform import Platform, current

log = logging.getLogger(__name__)
MAX_ANSWER_BYTES = 1 << 16  # a collector's answer is a small protobuf (a partial-success count)
_COMPRESS: dict[str, Callable[[bytes], bytes]] = {"gzip": gzip.compress, "deflate": zlib.compress}
# An accepted answer's body -> (items rejected anyway, the collector's message): a partial success.
PartialSuccess = Callable[[bytes], tuple[int, str]]


class OTLPHttpClient:
    """One signal's endpoint. Thread-safe; ``close()`` from another thread makes a send give up."""

    def __init__(
        self,
        signal: SignalConfig,
        user_agent: str,
        partial_success: PartialSuccess = lambda _body: (0, ""),
        platform: Platform | None = None,
    ) -> None:
        self._platform = platform or current()  # how a blocked send is interrupted
        url = urllib.parse.urlsplit(signal.endpoint)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ConfigError(f"OTLP endpoint {redacted(signal.endpoint)!r}: an http:// or https:// URL is needed")
        self._target = (url.hostname, url.port or (443 if url.scheme == "https" else 80))
        self._path = urllib.parse.urlunsplit(("", "", url.path or "/", url.query, ""))
        self._tls = _tls_context(signal) if url.scheme == "https" else None
        self._proxy: tuple[str, int] | None = None
        proxy_authorization: str | None = None
        if signal.proxy:
            self._proxy, proxy_authorization = _proxy(signal.proxy)
        # The user's headers win, whatever their case (a user-agent of theirs replaces ours, not joins it).
        ours = {"Content-Type": "application/x-protobuf", "User-Agent": user_agent}
        given = {name.lower() for name in signal.headers}
        self._headers = {**{k: v for k, v in ours.items() if k.lower() not in given}, **signal.headers}
        self._tunnel_headers: dict[str, str] = {}
        if self._proxy is not None and proxy_authorization is not None:
            if self._tls is None:  # plain HTTP through a proxy: the proxy reads every request
                self._headers["Proxy-Authorization"] = proxy_authorization
            else:  # https: only the CONNECT carries the credentials; the collector never sees them
                self._tunnel_headers["Proxy-Authorization"] = proxy_authorization
        if self._proxy is not None and self._tls is None:  # plain HTTP through a proxy: the absolute URL
            self._path = urllib.parse.urlunsplit(("http", url.netloc, url.path or "/", url.query, ""))
        self._compress = _COMPRESS.get(signal.compression)
        if self._compress is not None:
            self._headers["Content-Encoding"] = signal.compression
        self._timeout = signal.timeout
        self._partial = partial_success
        self._lock = threading.Lock()
        self._connection: http.client.HTTPConnection | None = None
        self._closed = False

    def post(self, body: bytes) -> Outcome:
        """What became of one request (never raises for what the network or the collector does)."""
        data = self._compress(body) if self._compress is not None else body
        with self._lock:
            reused = self._connection is not None
            while not self._closed:
                connection = self._connection or self._connect()
                try:
                    connection.request("POST", self._path, body=data, headers=self._headers)
                    answer = get_response(connection, time.monotonic() + self._timeout)
                    payload = answer.read(MAX_ANSWER_BYTES)
                except (OSError, http.client.HTTPException) as error:
                    self._drop()
                    # A kept-alive connection the collector closed while idle: once more, on a new one. Not
                    # after a timeout (the collector may have the request) nor after close().
                    if reused and closed_while_idle(error) and not self._closed:
                        reused = False
                        continue
                    return Outcome.refused(self._failure(error), retryable=True)
                if answer.will_close or not answer.isclosed():
                    self._drop()  # asked to close, or more answer than we read: not reusable
                return self._outcome(answer, payload)
            return Outcome.refused("the exporter is stopping", retryable=True)

    def close(self) -> None:
        """End the connection now, also under a send in progress, which then fails at once (a close()
        alone would leave a thread blocked in recv() waiting for its timeout on Linux, a shutdown() alone
        on Windows: the platform knows which); nothing is sent after."""
        self._closed = True
        connection = self._connection
        if connection is not None and connection.sock is not None:
            self._platform.interrupt(connection.sock)

    def _outcome(self, answer: http.client.HTTPResponse, payload: bytes) -> Outcome:
        if 200 <= answer.status < 300:
            try:
                return Outcome.taken(*self._partial(payload))
            except ValueError:  # not the protobuf the specification says: the request was taken all the same
                return Outcome.taken()
        status = f"the collector answered {answer.status} {answer.reason}".rstrip()
        if message := _message(answer.getheader("Content-Type") or "", payload):
            status += f": {message}"
        if answer.status == 407:
            status += " (check the proxy's credentials in HTTPS_PROXY / HTTP_PROXY)"
        retry_after = retry_after_seconds(answer.getheader("Retry-After"))
        return Outcome.refused(status, retryable=answer.status in RETRYABLE_HTTP_STATUSES, retry_after=retry_after)

    def _failure(self, error: BaseException) -> str:
        host, port = self._proxy or self._target
        where = f"{'the proxy ' if self._proxy else ''}{host}:{port}"
        if isinstance(error, socket.gaierror):
            return f"cannot resolve {host}: {error.strerror or error}"
        if isinstance(error, ConnectionRefusedError):
            return f"{where} refused the connection"
        if isinstance(error, TimeoutError):
            return f"no answer from {where} within {self._timeout:g} s ({error or 'timed out'})"
        if isinstance(error, ssl.SSLError):
            return f"TLS with {where} failed: {error.reason or error}"
        return f"{where}: {type(error).__name__}: {error}"

    def _connect(self) -> http.client.HTTPConnection:
        host, port = self._proxy or self._target
        connection: http.client.HTTPConnection
        if self._tls is not None:
            connection = http.client.HTTPSConnection(host, port, timeout=self._timeout, context=self._tls)
        else:
            connection = http.client.HTTPConnection(host, port, timeout=self._timeout)
        if self._proxy is not None and self._tls is not None:
            connection.set_tunnel(*self._target, headers=self._tunnel_headers)  # CONNECT, then TLS end to end
        self._connection = connection
        return connection

    def _drop(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None


def _message(content_type: str, payload: bytes) -> str:
    """What an error answer says: a ``google.rpc.Status`` (as the specification has collectors answer), or
    text; shortened and on one line."""
    text = ""
    if "protobuf" in content_type:
        with contextlib.suppress(ValueError):  # not a protobuf message: then there is nothing to say
            text = status_message(payload)
    elif content_type.startswith(("text/", "application/json")):
        text = payload[:300].decode("utf-8", "replace")
    text = " ".join(text.split())
    return text if len(text) <= 200 else text[:199] + "…"


def _tls_context(signal: SignalConfig) -> ssl.SSLContext:
    try:
        context = ssl.create_default_context(cafile=signal.certificate)
        if signal.client_certificate:
            context.load_cert_chain(signal.client_certificate, signal.client_key)
    except (OSError, ssl.SSLError) as error:
        raise ConfigError(f"OTEL_EXPORTER_OTLP_*CERTIFICATE/CLIENT_KEY: {error}") from None
    return context


def _proxy(proxy: str) -> tuple[tuple[str, int], str | None]:
    """The proxy's address, and the Proxy-Authorization its URL's credentials make (if any)."""
    url = urllib.parse.urlsplit(proxy if "://" in proxy else f"http://{proxy}")
    if url.scheme != "http" or not url.hostname:
        raise ConfigError(
            "the proxy for the OTLP endpoint (HTTPS_PROXY / HTTP_PROXY): an http:// proxy URL is needed"
        )  # the value is not echoed: it may hold a password
    authorization = None
    if url.username is not None:
        user = urllib.parse.unquote(url.username)
        password = urllib.parse.unquote(url.password or "")
        authorization = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
    return (url.hostname, url.port or 80), authorization
