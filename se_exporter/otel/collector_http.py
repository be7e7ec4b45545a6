"""The ``requests.Session`` the official OTLP/HTTP exporter sends with (its public ``session`` parameter),
holding the collector's answer inside our bounds, which requests and urllib3 do not keep by themselves:

- **A total deadline per request.** requests' ``timeout`` bounds each connect and each socket read, so a
  collector that drips its answer (a byte every few seconds) holds one export for ever. The exporter
  hands every request the time left of its export (``OTEL_EXPORTER_OTLP_TIMEOUT``); when that runs out
  the request's socket is shut down, which ends the blocked read, and the attempt is a timeout.
- **An answer read up to ``MAX_ANSWER_BYTES``, never inflated past it.** requests reads the whole body,
  and urllib3 inflates gzip by itself (a 0.5 MB gzip bomb is 512 MiB). Here the body is read raw, a chunk
  at a time, and inflated with zlib's ``max_length``; what goes past the bound is not read (the connection
  is closed). An OTLP answer is a few bytes: a partial success or a ``google.rpc.Status``.
- **Every answer reported**, to ``on_answer`` (what the collector said, ``otel/answers.py``) or
  ``on_error`` (why there was no answer), before the exporter sorts it: the exporter counts any status
  below 400 as success, and a 3xx is no success (it sends with redirects off, so the records went nowhere).

The socket is reached through urllib3's public extension points (``PoolManager.pool_classes_by_scheme``,
``HTTPConnectionPool.ConnectionCls``): a connection records itself as the calling thread's when it
connects or sends, so the deadline's timer knows what to shut down. ``tests/otel/test_collector_answers.py``
fails if either stops being used.
"""

from __future__ import annotations

import contextlib
import io
import socket
import threading
import time
import zlib
from collections.abc import Callable
from typing import Any

import requests
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

from se_exporter.otel.answers import MAX_ANSWER_BYTES

_CHUNK = 16 << 10
_INFLATED = {"gzip", "x-gzip", "deflate"}  # what urllib3 would inflate itself (zlib: gzip or zlib headers)


class AnswerTooSlow(requests.exceptions.ReadTimeout):
    """The collector did not finish answering within the request's total deadline."""


class _Request:
    """One request's total deadline, and the connection it is sent on (to shut down when the time is up)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._connection: HTTPConnection | None = None
        self.expired = False
        self._done = False

    def attach(self, connection: HTTPConnection) -> None:
        with self._lock:
            self._connection = connection
            if self.expired:
                _shut(connection)

    def expire(self) -> None:
        with self._lock:
            if self._done:
                return
            self.expired = True
            if self._connection is not None:
                _shut(self._connection)

    def finish(self) -> None:
        with self._lock:
            self._done = True


_current = threading.local()  # the calling thread's _Request: the exporters send on their own threads


def _attach(connection: HTTPConnection) -> None:
    request: _Request | None = getattr(_current, "request", None)
    if request is not None:
        request.attach(connection)


def _shut(connection: HTTPConnection) -> None:
    sock = connection.sock
    if sock is not None:
        with contextlib.suppress(OSError):  # closed meanwhile: nothing left to end
            sock.shutdown(socket.SHUT_RDWR)


class _Connection(HTTPConnection):
    def connect(self) -> None:
        super().connect()
        _attach(self)

    def request(self, *args: Any, **kwargs: Any) -> None:  # also a kept-alive connection's next request
        _attach(self)
        super().request(*args, **kwargs)


class _TLSConnection(_Connection, HTTPSConnection):  # the same watch; HTTPSConnection's connect, via the MRO
    pass


class _Pool(HTTPConnectionPool):
    ConnectionCls = _Connection


class _TLSPool(HTTPSConnectionPool):
    ConnectionCls = _TLSConnection


class _Adapter(HTTPAdapter):
    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = {"http": _Pool, "https": _TLSPool}


class CollectorSession(requests.Session):
    """What the OTLP/HTTP exporter sends with; ``on_answer`` sees every answer (its body within the
    bound), ``on_error`` every request that got none."""

    def __init__(self, on_answer: Callable[[requests.Response], None], on_error: Callable[[Exception], None]) -> None:
        super().__init__()
        self.headers["Accept-Encoding"] = "identity"  # what comes compressed all the same is inflated here
        adapter = _Adapter()
        self.mount("http://", adapter)
        self.mount("https://", adapter)
        self._on_answer = on_answer
        self._on_error = on_error

    def merge_environment_settings(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """The session's own CA wins: requests lets ``REQUESTS_CA_BUNDLE`` or ``CURL_CA_BUNDLE`` replace it
        (psf/requests#3829), so the CA of ``OTEL_EXPORTER_OTLP_CERTIFICATE``, which the exporter puts on
        its session, was ignored wherever those are set. Proxies from the environment still apply."""
        settings: dict[str, Any] = super().merge_environment_settings(*args, **kwargs)
        if isinstance(self.verify, str):
            settings["verify"] = self.verify
        return settings

    def send(self, request: requests.PreparedRequest, **kwargs: Any) -> requests.Response:
        kwargs["stream"] = True  # the body is ours to read, within the bound
        budget = _seconds(kwargs.get("timeout"))
        watch = _current.request = _Request()
        timer = threading.Timer(budget, watch.expire) if budget is not None else None
        if timer is not None:
            timer.daemon = True
            timer.start()
        started = time.monotonic()
        try:
            response = super().send(request, **kwargs)
            body = _bounded_body(response)
            if watch.expired:  # the shut-down socket may end a body that has no length as if complete
                raise AnswerTooSlow("the socket was shut down at the deadline")
        except Exception as error:
            failure = _failure(error, watch.expired, time.monotonic() - started)
            self._on_error(failure)
            raise failure from None
        finally:
            if timer is not None:
                timer.cancel()
            watch.finish()
            _current.request = None
        response.raw = io.BytesIO(body)  # requests reads a plain file object as it is (Response.content)
        self._on_answer(response)
        return response


def _bounded_body(response: requests.Response) -> bytes:
    """At most ``MAX_ANSWER_BYTES`` of the answer's body, inflated; the connection is kept only when the
    whole body was read."""
    raw = response.raw
    encoding = response.headers.get("Content-Encoding", "").strip().lower()
    inflate = zlib.decompressobj(wbits=47) if encoding in _INFLATED else None  # 47: gzip or zlib header
    body = bytearray()
    complete = False
    try:
        while len(body) <= MAX_ANSWER_BYTES:
            chunk = raw.read(_CHUNK, decode_content=False)
            if not chunk:
                complete = True
                break
            if inflate is None:
                body += chunk
            else:
                body += inflate.decompress(chunk, MAX_ANSWER_BYTES + 1 - len(body))
                if inflate.unconsumed_tail:
                    break  # it inflates past the bound
    except zlib.error:
        body.clear()  # not what it says it is: nothing to read in it
    if encoding and encoding != "identity" and inflate is None:
        body.clear()  # an encoding we did not ask for and cannot inflate within the bound (br, zstd)
    if not complete or len(body) > MAX_ANSWER_BYTES:
        raw.close()  # the rest is not read: the connection cannot be used again
    raw.release_conn()
    return bytes(body[:MAX_ANSWER_BYTES])


def _failure(error: Exception, expired: bool, took: float) -> requests.RequestException:
    """What became of a request that got no answer, as the exporter sorts it (a connection error or a
    timeout is retried within the export's deadline)."""
    if expired:
        return AnswerTooSlow(f"the collector did not answer within the deadline ({took:.1f} s)")
    if isinstance(error, requests.RequestException):
        return error
    return requests.exceptions.ConnectionError(f"the answer broke off: {error}")  # urllib3's, from the body


def _seconds(timeout: object) -> float | None:
    """requests' ``timeout``: seconds, or (connect, read); the total deadline of a request."""
    if isinstance(timeout, tuple):
        parts = [part for part in timeout if isinstance(part, int | float)]
        return float(sum(parts)) if parts else None
    return float(timeout) if isinstance(timeout, int | float) else None
