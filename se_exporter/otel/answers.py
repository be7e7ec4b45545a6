"""What a collector answered to one ``export()`` of an official OTLP exporter (both protocols), sorted as the
OTLP specification sorts answers (``Outcome``):

- accepted: the collector took the request; the items of it it ``rejected`` anyway (a partial success)
  are never sent again, only counted and reported with the collector's message;
- refused and ``retryable`` (HTTP 429, 502, 503, 504; gRPC UNAVAILABLE and its kin; a connection that
  failed or timed out): sent again later, not before ``retry_after`` (``Retry-After``, gRPC ``RetryInfo``);
- refused for good (any other 4xx or 5xx; gRPC INVALID_ARGUMENT and the like): never sent again.

``problem`` says why, for the warning an operator reads.

The official exporters answer only SUCCESS or FAILURE: a partial success is ignored, a refusal for good looks
like an outage, and OTLP/HTTP counts any status below 400 as success (a 3xx, with redirects off, delivered
nothing). So the answers are watched where the exporters let us, and what was watched decides. OTLP/gRPC
makes its own channel: ``grpc_exporter_class`` wraps each one it makes in a client interceptor
(``grpc.intercept_channel``). OTLP/HTTP sends with our ``requests.Session`` (its public ``session``
parameter, ``CollectorSession``), which reports every answer to ``on_answer`` and every request that got
none to ``on_error``, and holds the answer inside our bounds, which requests and urllib3 do not keep:

- **a total deadline per request**: requests' ``timeout`` bounds each read, so a collector dripping its
  answer holds an export for ever; here the request gets the time left of its export
  (``OTEL_EXPORTER_OTLP_TIMEOUT``), and when that runs out its socket is shut down, which ends the read;
- **an answer read up to ``MAX_ANSWER_BYTES``, never inflated past it** (``common/inflate.py``): an OTLP
  answer is a few bytes, a partial success or a ``google.rpc.Status``.

The socket is reached through urllib3's public extension points (``PoolManager.pool_classes_by_scheme``,
``HTTPConnectionPool.ConnectionCls``): a connection records itself as the calling thread's, so the
deadline's timer knows what to shut down. ``tests/otel/test_collector_answers.py`` fails if either stops
being used. What an exporter we know nothing of (console, a vendor's) answers is only SUCCESS or FAILURE.
"""

from __future__ import annotations

import contextlib
import io
import socket
import ssl
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import requests
from google.protobuf.message import DecodeError, Message
from google.rpc.status_pb2 import Status
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

from se_exporter.common.inflate import BodyTooLarge, BoundedDecoder

# Per the OTLP specification; every other 4xx and 5xx must not be retried.
RETRYABLE_HTTP_STATUSES = frozenset({429, 502, 503, 504})


# A collector asking for a longer wait (Retry-After, RetryInfo) is asked again after this, and the warning
# says so: what the spool holds is maintenance happening now, worth little in an hour, and a gateway's
# blanket "Retry-After: 3600" (a rate limit shared with other clients, a maintenance page) should not stop
# delivery for an hour when the collector behind it may be back in minutes. Each attempt is one request.
RETRY_AFTER_CAP_SECONDS = 300.0


@dataclass(frozen=True, slots=True)
class Outcome:
    accepted: bool
    retryable: bool = True
    retry_after: float | None = None
    rejected: int = 0
    problem: str = ""

    @classmethod
    def taken(cls, rejected: int = 0, message: str = "") -> Outcome:
        problem = f"the collector rejected {rejected} of them: {message or 'no reason given'}" if rejected else ""
        return cls(True, rejected=rejected, problem=problem)

    @classmethod
    def refused(cls, problem: str, *, retryable: bool, retry_after: float | None = None) -> Outcome:
        after = None if retry_after is None else min(max(0.0, retry_after), RETRY_AFTER_CAP_SECONDS)
        if retry_after is not None and retry_after > RETRY_AFTER_CAP_SECONDS:
            problem += f"; it asked to wait {retry_after:.0f} s: asked again after {RETRY_AFTER_CAP_SECONDS:.0f} s"
        return cls(False, retryable=retryable, retry_after=after, problem=problem)


# gRPC codes the specification calls retryable; RESOURCE_EXHAUSTED only with a RetryInfo.
RETRYABLE_GRPC_CODES = frozenset(
    {"CANCELLED", "DEADLINE_EXCEEDED", "ABORTED", "OUT_OF_RANGE", "UNAVAILABLE", "DATA_LOSS"}
)


MAX_ANSWER_BYTES = 64 << 10  # an OTLP answer is a partial success or a Status: bytes, not megabytes

NO_ANSWER = "the exporter failed before the collector answered"


class CollectorAnswers:
    """The last answer of the calling thread's export (the shipper and each span processor export on their
    own thread). ``Response`` is the protobuf class of a successful answer (its ``partial_success``)."""

    def __init__(self, response: type[Message]) -> None:
        self._response = response
        self._local = threading.local()

    def begin(self) -> None:
        """Before an export: forget what an earlier one was answered."""
        self._local.last = None

    def outcome(self, succeeded: bool) -> Outcome:
        """The export's outcome: the last answer it got, whatever the exporter made of it (``succeeded``
        decides only when it sent nothing)."""
        last: Outcome | None = getattr(self._local, "last", None)
        if last is not None:
            return last
        return Outcome(True) if succeeded else Outcome.refused(NO_ANSWER, retryable=True)

    def http_answer(self, response: Any) -> None:
        """Every answer of the OTLP/HTTP exporter, its body already read within its bound."""
        status = response.status_code
        if 200 <= status < 300:
            self._local.last = self._taken(response.content)
            return
        words = f"the collector answered {status} {response.reason or ''}".rstrip()
        if 300 <= status < 400:  # OTLP exporters send with redirects off: the records went nowhere
            where = response.headers.get("Location", "")
            words += f", a redirect to {_short(where)!r}" if where else ", a redirect"
            words += " (OTLP exporters do not follow redirects: set the endpoint it names)"
        elif message := _message(response.headers.get("Content-Type", ""), response.content):
            words += f": {message}"
        retry_after = _retry_after_seconds(response.headers.get("Retry-After"))
        self._local.last = Outcome.refused(words, retryable=status in RETRYABLE_HTTP_STATUSES, retry_after=retry_after)

    def http_error(self, error: BaseException) -> None:
        """A request of the OTLP/HTTP exporter that got no answer, and why."""
        self._local.last = Outcome.refused(f"no answer from the collector: {_why(error)}", retryable=True)

    def grpc_interceptor(self) -> Any:
        """A unary client interceptor that sees every gRPC ``Export`` call and its answer."""
        import grpc

        answers = self

        class _Watch(grpc.UnaryUnaryClientInterceptor):  # type: ignore[misc]
            def intercept_unary_unary(self, continuation: Callable[..., Any], details: Any, request: Any) -> Any:
                call = continuation(details, request)
                answers._grpc_answer(call)
                return call

        return _Watch()

    def _grpc_answer(self, call: Any) -> None:
        error = call.exception()
        if error is None:
            response = call.result()
            rejected, message = _partial(response)
            self._local.last = Outcome.taken(rejected, message)
            return
        name = error.code().name if error.code() is not None else "UNKNOWN"
        retry_after = _retry_info(error)
        retryable = name in RETRYABLE_GRPC_CODES or (name == "RESOURCE_EXHAUSTED" and retry_after is not None)
        words = f"the collector answered {name}: {error.details() or 'no details'}"
        self._local.last = Outcome.refused(words, retryable=retryable, retry_after=retry_after)

    def _taken(self, body: bytes) -> Outcome:
        response = self._response()
        with contextlib.suppress(DecodeError):  # not the protobuf the specification says: taken all the same
            response.ParseFromString(body)
        return Outcome.taken(*_partial(response))


def grpc_exporter_class(exporter: type[Any], answers: CollectorAnswers) -> type[Any]:
    """The official gRPC exporter ``exporter``, its channel watched by ``answers`` (it makes the channel
    itself, at start and again after UNAVAILABLE, in ``_initialize_channel_and_stub``)."""
    import grpc

    class Watched(exporter):  # type: ignore[misc]
        def _initialize_channel_and_stub(self) -> None:
            super()._initialize_channel_and_stub()
            channel: Any = getattr(self, "_channel")  # noqa: B009 - typed Any: the exporter's own attribute
            self._channel = grpc.intercept_channel(channel, answers.grpc_interceptor())
            self._client = self._stub(self._channel)

    Watched.__name__ = Watched.__qualname__ = exporter.__name__
    return Watched


def _partial(response: Any) -> tuple[int, str]:
    partial = getattr(response, "partial_success", None)
    if partial is None:
        return 0, ""
    rejected: Any = getattr(partial, "rejected_log_records", None) or getattr(partial, "rejected_spans", 0)
    return int(rejected), str(partial.error_message)


def _why(error: BaseException) -> str:
    """Why a request got no answer, in words: the innermost cause that says it."""
    causes: list[BaseException] = []
    seen: BaseException | None = error
    while seen is not None and seen not in causes and len(causes) < 10:
        causes.append(seen)
        nested = [arg for arg in getattr(seen, "args", ()) if isinstance(arg, BaseException)]
        seen = seen.__cause__ or seen.__context__ or (nested[0] if nested else None)
        if seen is None and hasattr(causes[-1], "reason") and isinstance(causes[-1].reason, BaseException):
            seen = causes[-1].reason  # urllib3's MaxRetryError and NewConnectionError keep it there
    for cause in causes:
        if isinstance(cause, ConnectionRefusedError):
            return "it refused the connection"
        if isinstance(cause, socket.gaierror):
            return "its host name does not resolve"
    for cause in causes:
        if isinstance(cause, TimeoutError | ssl.SSLError):
            return _short(str(cause) or type(cause).__name__)
    return _short(str(error) or type(error).__name__)


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= 200 else text[:199] + "…"


def _message(content_type: str, payload: bytes) -> str:
    """What an error answer says: a ``google.rpc.Status`` (as the specification has collectors answer), or
    text; shortened and on one line."""
    text = ""
    if "protobuf" in content_type:
        status = Status()
        with contextlib.suppress(DecodeError):  # not a protobuf message: then there is nothing to say
            status.ParseFromString(payload)
            text = status.message
    elif content_type.startswith(("text/", "application/json")):
        text = payload[:300].decode("utf-8", "replace")
    return _short(text)


def _retry_after_seconds(value: str | None) -> float | None:
    """``Retry-After`` in seconds (a date is left to the exporter's own retry, which reads it)."""
    if value is None or not value.strip().isdigit():
        return None
    return float(value.strip())


def _retry_info(error: Any) -> float | None:
    """The delay of the ``google.rpc.RetryInfo`` in the call's trailers, if the collector sent one."""
    from google.rpc.error_details_pb2 import RetryInfo

    raw = dict(error.trailing_metadata() or ()).get("google.rpc.retryinfo-bin")
    if raw is None:
        return None
    info = RetryInfo()
    try:
        info.ParseFromString(raw)
    except DecodeError:
        return None
    return float(info.retry_delay.seconds + info.retry_delay.nanos / 1e9)


_CHUNK = 16 << 10


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
        budget = _timeout_seconds(kwargs.get("timeout"))
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
    body = bytearray()
    complete = False
    try:
        decoder = BoundedDecoder(response.headers.get("Content-Encoding", ""), MAX_ANSWER_BYTES)
        while chunk := raw.read(_CHUNK, decode_content=False):
            body += decoder.feed(chunk)
        complete = True
    except BodyTooLarge as full:
        body += full.fitting
    except (ValueError, zlib.error):  # an encoding we cannot inflate within the bound (br, zstd), or broken data
        body.clear()
    if not complete:
        raw.close()  # the rest is not read: the connection cannot be used again
    raw.release_conn()
    return bytes(body)


def _failure(error: Exception, expired: bool, took: float) -> requests.RequestException:
    """What became of a request that got no answer, as the exporter sorts it (a connection error or a
    timeout is retried within the export's deadline)."""
    if expired:
        return AnswerTooSlow(f"the collector did not answer within the deadline ({took:.1f} s)")
    if isinstance(error, requests.RequestException):
        return error
    return requests.exceptions.ConnectionError(f"the answer broke off: {error}")  # urllib3's, from the body


def _timeout_seconds(timeout: object) -> float | None:
    """requests' ``timeout``: seconds, or (connect, read); the total deadline of a request."""
    if isinstance(timeout, tuple):
        parts = [part for part in timeout if isinstance(part, int | float)]
        return float(sum(parts)) if parts else None
    return float(timeout) if isinstance(timeout, int | float) else None
