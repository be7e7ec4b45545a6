"""What a collector answered to one ``export()`` of an official OTLP exporter, as the OTLP specification
sorts answers (``common/outcome.py``): taken (perhaps with a partial success), refused and retryable, or
refused for good.

The official exporters answer SUCCESS or FAILURE and keep the rest to themselves: the records a collector
rejected in a 200 (a partial success) are ignored, a refusal for good looks like an outage, and OTLP/HTTP
counts any status below 400 as success (a 3xx, with redirects off, delivered nothing). So the answers are
watched where the exporters let us, and what was watched decides: OTLP/HTTP sends with our
``requests.Session`` (its public ``session`` parameter; ``otel/collector_http.py``), which reports every
answer and every request that got none; OTLP/gRPC makes its own channel, so ``grpc_exporter_class`` gives
its exporter class the one change of wrapping that channel in a client interceptor
(``grpc.intercept_channel``) each time it makes one. What an exporter we know nothing of (console, a
vendor's) answers is only SUCCESS or FAILURE: a FAILURE is then an outage.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
from collections.abc import Callable
from typing import Any

from google.protobuf.message import DecodeError, Message
from google.rpc.status_pb2 import Status

from se_exporter.common.outcome import RETRYABLE_HTTP_STATUSES, Outcome

# gRPC codes the specification calls retryable; RESOURCE_EXHAUSTED only with a RetryInfo.
RETRYABLE_GRPC_CODES = frozenset(
    {"CANCELLED", "DEADLINE_EXCEEDED", "ABORTED", "OUT_OF_RANGE", "UNAVAILABLE", "DATA_LOSS"}
)
MAX_ANSWER_BYTES = 64 << 10  # an OTLP answer is a partial success or a Status: bytes, not megabytes
NO_ANSWER = "the exporter failed before the collector answered"


class Answers:
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
        retry_after = _seconds(response.headers.get("Retry-After"))
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


def grpc_exporter_class(exporter: type[Any], answers: Answers) -> type[Any]:
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


def _seconds(value: str | None) -> float | None:
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
