"""HTTP client for the Instance Metadata Service: Scheduled Events and compute metadata, over httpx.

Two ``httpx.Client``s share the settings: one for GETs, its connection kept alive between polls, and one
for approval POSTs, which never keeps a connection (a POST on a kept-alive connection found closed would
have to be sent again, and approving again is the approver's decision after a fresh look at the event,
never the transport's). Neither reads the environment (``trust_env=False``): IMDS is link-local and
rejects proxied requests. Every request passes the shared rate limiter (``RateLimiter``; ``Backoff`` paces
retries), has one total deadline and a bounded body, is timed into ``on_response`` (the metrics) and
traced as an HTTP client span; a GET also ends soon after the ``stop`` event is set. httpx's exceptions
become ``errors.IMDSError``'s.

The Scheduled Events api-version is the first of ``--imds.api-version`` (newest first) that this VM's IMDS
accepts. A GET that IMDS answers as it answers a version it does not serve (404, or 400 naming the
api-version) is asked again, in the same poll, with the next version, so no poll is lost to a switch; the
preferred version is tried again every ``retry_preferred_seconds`` (on the injected monotonic clock), so a
VM enrolled later gets it. Approvals are POSTed with the version in use. Each choice is said once.

**One total deadline** for an HTTP request (to IMDS, or the image's health check), which httpx lacks: httpx
bounds each read, never their sum, so a peer dripping its status line, headers, ``100 Continue`` answers,
chunk-size lines or trailers one byte a second holds a request for ever. httpcore's network backend (its
documented extension point, ``httpcore.NetworkBackend``) is where every connect, TLS handshake, read and
write happens, so each is given at most the time left until the deadline of the request on this thread
(``within``). A request given a stop event ends within ``STOP_CHECK_SECONDS`` of it being set (the
exporter's stop, so that a first IMDS answer taking two minutes never holds up a service stop). httpx
offers no parameter for the backend (encode/httpx#3749), so ``DeadlineTransport`` is an
``httpx.BaseTransport`` (httpx's documented way to bring a transport) owning an ``httpcore.ConnectionPool``
on that backend.

**The answer's body** (``read_body``) is bounded in bytes after decoding (``common/inflate.py``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import random
import ssl
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import httpcore
import httpx

from se_exporter import __version__
from se_exporter.common.inflate import BodyTooLarge, BoundedDecoder
from se_exporter.common.tracing import client_kind, mark_error
from se_exporter.errors import (
    TOO_SLOW,
    IMDSConnectionError,
    IMDSError,
    IMDSHTTPError,
    IMDSStopped,
    IMDSTimeout,
    InvalidDocument,
)
from se_exporter.imds import IMDS_MIN_REQUEST_SPACING, api_versions
from se_exporter.imds.document import Document, VMIdentity, parse_compute, parse_document

if TYPE_CHECKING:
    from opentelemetry import trace


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


class RateLimiter:
    """Spaces calls at least ``min_interval`` seconds apart; safe to share between threads."""

    def __init__(
        self,
        min_interval: float = IMDS_MIN_REQUEST_SPACING,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], object] = time.sleep,
    ) -> None:
        self._min_interval = min_interval
        self._monotonic = monotonic
        self._sleep = sleep
        self._lock = threading.Lock()
        self._next_slot = float("-inf")

    def acquire(self) -> None:
        """Block until this caller's slot comes; slots are handed out in call order."""
        with self._lock:
            now = self._monotonic()
            slot = max(now, self._next_slot)
            self._next_slot = slot + self._min_interval
        if slot > now:
            self._sleep(slot - now)


class Backoff:
    """Exponential backoff with "equal jitter": half the delay fixed, half random.

    The fixed half guarantees the pause grows; the random half keeps a fleet of VMs
    that failed together from retrying in lockstep.
    """

    def __init__(self, base: float, cap: float, rng: random.Random | None = None) -> None:
        if base <= 0 or cap < base:
            raise ValueError(f"backoff needs 0 < base <= cap, got base={base} cap={cap}")
        self.base = base
        self.cap = cap
        self._rng = rng or random.Random()  # noqa: S311 - jitter, not cryptography
        self.attempt = 0

    def next_delay(self) -> float:
        ceiling = min(self.cap, self.base * 2.0**self.attempt)
        self.attempt = min(self.attempt + 1, 32)
        return ceiling / 2 + self._rng.uniform(0, ceiling / 2)

    def reset(self) -> None:
        self.attempt = 0


# A usual document is a few kB, but one listing thousands of events (a large scale set) is not: 5,000
# events with every field are ~1.4 MB. 4 MiB holds ~15,000 and still caps what a broken peer makes us hold.
MAX_BODY_BYTES = 4 << 20


def read_body(
    answer: httpx.Response,
    deadline: float,
    what: str = "IMDS answer",
    monotonic: Callable[[], float] = time.monotonic,
) -> bytes:
    """The decoded body of the streamed ``answer`` (``what``: "IMDS GET /path", for messages).

    A success whose body is too large or undecodable is an ``InvalidDocument``; an error page is cut
    (its start explains it); past ``deadline`` (on ``monotonic``) the answer is abandoned as an
    ``IMDSTimeout``.
    """
    success = 200 <= answer.status_code < 300
    encoding = answer.headers.get("content-encoding", "")
    chunks: list[bytes] = []
    try:
        decoder = BoundedDecoder(encoding, MAX_BODY_BYTES)
        for raw in answer.iter_raw():
            if monotonic() > deadline:
                raise IMDSTimeout(f"{what} did not finish its answer in time (a slow or dripping answer)")
            chunks.append(decoder.feed(raw))
    except BodyTooLarge as full:
        chunks.append(full.fitting)
        if success:
            raise InvalidDocument(f"IMDS body exceeds {MAX_BODY_BYTES} bytes (decoded); not read further") from None
    except zlib.error as exc:
        if success:
            raise InvalidDocument(
                f"IMDS body cannot be decoded (Content-Encoding: {encoding.strip()}): {exc}"
            ) from None
    except ValueError as exc:  # an encoding we do not decode
        if success:
            raise InvalidDocument(f"IMDS body cannot be decoded ({exc})") from None
    return b"".join(chunks)  # an undecodable or oversized error page: its status code says enough


log = logging.getLogger(__name__)

EVENTS_PATH = "/metadata/scheduledevents"

COMPUTE_PATH = "/metadata/instance/compute"

COMPUTE_API_VERSION = "2021-02-01"

CONNECT_TIMEOUT_SECONDS = 2.0  # IMDS is link-local: a connection takes microseconds or never comes

REQUEST_HEADERS = {
    "Metadata": "true",
    "Accept": "application/json",
    "Accept-Encoding": "identity",  # a compressed answer is decoded by read_body, bounded, if one comes
    "User-Agent": f"se-exporter/{__version__}",
}


POST_HEADERS = {"Content-Type": "application/json"}

ResponseObserver = Callable[[str, str, float], None]  # method, HTTP code or "error", seconds


@dataclass(frozen=True, slots=True)
class ClientSettings:
    base_url: str = "http://169.254.169.254"
    api_versions: tuple[str, ...] = (api_versions.DEFAULT,)  # newest first: the first IMDS accepts is used
    timeout: float = 5.0
    # Microsoft: the first call after Scheduled Events is enabled may take up to 2 minutes.
    first_call_timeout: float = 120.0
    retry_preferred_seconds: float = 3600.0  # while a later version is in use, the first is asked again


def refuses_version(error: IMDSHTTPError) -> bool:
    """IMDS's answer to an api-version it does not serve: 404, or 400 whose body names the api-version (a 400
    for a missing Metadata header does not)."""
    if error.status_code == 404:
        return True
    text = error.body.lower()
    return error.status_code == 400 and (b"api-version" in text or b"newest-versions" in text)


class IMDSClient:
    def __init__(
        self,
        settings: ClientSettings,
        limiter: RateLimiter,
        *,
        on_response: ResponseObserver | None = None,
        tracer: trace.Tracer | None = None,
        stop: threading.Event | None = None,  # the exporter's stop: a GET in flight ends, IMDSStopped
        monotonic: Callable[[], float] = time.monotonic,  # when the preferred api-version is asked again
    ) -> None:
        if not settings.api_versions:
            raise ValueError("at least one api-version")
        self.settings = settings
        self._monotonic = monotonic
        self._in_use = 0  # index in settings.api_versions of the version IMDS last accepted
        self._chosen = False  # a version was accepted (and said) at least once
        self._retry_preferred_at = float("inf")
        self._stop = stop
        self._limiter = limiter
        self._on_response = on_response or (lambda _m, _c, _s: None)
        self._tracer = tracer  # None: no spans (OpenTelemetry is not even imported)
        self._answered_once = False
        self._last_digest = b""  # of the last body parsed: the body itself (up to 4 MiB) is not kept
        self._last_document: Document | None = None
        self._targets: dict[tuple[str, str, str], _Target] = {}
        self._plain_http = httpx.URL(settings.base_url).scheme == "http"
        keep_one = httpx.Limits(max_connections=4, max_keepalive_connections=1, keepalive_expiry=30.0)
        self._gets = _client(settings, DeadlineTransport(keep_one))
        self._posts = _client(settings, DeadlineTransport(httpx.Limits(max_keepalive_connections=0)))

    def close(self) -> None:
        self._gets.close()
        self._posts.close()

    @property
    def api_version(self) -> str:
        """The Scheduled Events api-version in use (before any answer: the preferred one)."""
        return self.settings.api_versions[self._in_use]

    def get_document(self) -> Document:
        timeout = self.settings.timeout if self._answered_once else self.settings.first_call_timeout
        body = self._get_events(timeout)
        self._answered_once = True
        digest = hashlib.blake2b(body, digest_size=32).digest()
        if digest != self._last_digest or self._last_document is None:  # most polls repeat the last answer
            self._last_document = parse_document(body)
            self._last_digest = digest
        return self._last_document

    def _get_events(self, timeout: float) -> bytes:
        """The events' body, from the first version IMDS accepts: the one in use, or once the retry is due the
        preferred one and those after it."""
        versions = self.settings.api_versions
        first = self._in_use
        if first and self._monotonic() >= self._retry_preferred_at:
            first = 0
        refused: list[str] = []
        for index in range(first, len(versions)):
            try:
                body = self._request("GET", EVENTS_PATH, versions[index], timeout=timeout)
            except IMDSStopped:
                raise
            except IMDSError as error:
                # An hourly retry that fails in any way falls back to the version in use, in the same poll.
                retrying = index < self._in_use
                refusal = isinstance(error, IMDSHTTPError) and refuses_version(error)
                if not retrying and (index + 1 == len(versions) or not refusal):
                    raise
                if isinstance(error, IMDSHTTPError):
                    snippet = error.body[:120].decode("utf-8", "replace").strip()
                    refused.append(f"{versions[index]} ({error.status_code} {snippet!r})")
                else:
                    refused.append(f"{versions[index]} ({error.reason})")
                continue
            if index and not first:  # the preferred version was just refused: asked again later
                self._retry_preferred_at = self._monotonic() + self.settings.retry_preferred_seconds
            self._chose(index, refused)
            return body
        raise AssertionError("unreachable: the last version's refusal is raised")

    def _chose(self, index: int, refused: list[str]) -> None:
        """Say which version answered, when it is not the one in use (or the first time), and why."""
        versions = self.settings.api_versions
        if self._chosen and index == self._in_use:
            if refused:
                log.debug("IMDS still refuses api-version %s; keeping %s", ", ".join(refused), versions[index])
            return
        if refused:
            log.warning(
                "IMDS Scheduled Events api-version %s in use: IMDS refused %s; the preferred version is asked again "
                "every %.0f s",
                versions[index],
                ", ".join(refused),
                self.settings.retry_preferred_seconds,
            )
        elif len(versions) > 1 and self._chosen:
            log.info("IMDS Scheduled Events api-version %s in use again: IMDS accepts it now", versions[index])
        else:
            log.info("IMDS Scheduled Events api-version %s in use", versions[index])
        self._in_use, self._chosen = index, True

    def get_identity(self) -> VMIdentity:
        return parse_compute(self._request("GET", COMPUTE_PATH, COMPUTE_API_VERSION))

    def approve(self, event_ids: Sequence[str], *, paced: bool = True) -> None:
        """POST StartRequests once. Retries are the approver's (approval.poster): each one follows a fresh
        decision on the latest document, which a retry loop in here could not make. ``paced=False``: the
        caller waited for its slot (``pace``) before that decision, so nothing waits between the two."""
        payload = json.dumps({"StartRequests": [{"EventId": event_id} for event_id in event_ids]})
        self._request("POST", EVENTS_PATH, self.api_version, content=payload.encode(), paced=paced)

    def pace(self) -> None:
        """Wait for the next request slot of the 5 requests/s limit (the slot is this caller's)."""
        self._limiter.acquire()

    def _request(
        self,
        method: str,
        path: str,
        api_version: str,
        *,
        content: bytes | None = None,
        timeout: float | None = None,
        paced: bool = True,
    ) -> bytes:
        if paced:
            self._limiter.acquire()
        target = self._target(method, path, api_version)
        if self._tracer is None:
            return self._timed(method, target, content, timeout, None)
        with self._tracer.start_as_current_span(method, kind=client_kind(), attributes=target.attributes) as span:
            return self._timed(method, target, content, timeout, span)

    def _timed(
        self, method: str, target: _Target, content: bytes | None, timeout: float | None, span: trace.Span | None
    ) -> bytes:
        """``_send``, timed into ``on_response`` (the metrics) and its outcome on ``span``."""
        started = time.perf_counter()
        try:
            body, code = self._send(method, target, content, timeout)
        except IMDSError as error:
            code_label = str(error.status_code) if isinstance(error, IMDSHTTPError) else "error"
            self._on_response(method, code_label, time.perf_counter() - started)
            if span is not None:
                _record_error(span, error)
            raise
        self._on_response(method, str(code), time.perf_counter() - started)
        if span is not None:
            span.set_attribute("http.response.status_code", code)
        return body

    def _target(self, method: str, path: str, api_version: str) -> _Target:
        key = (method, path, api_version)
        if key not in self._targets:
            self._targets[key] = _make_target(self._gets.base_url, method, path, api_version)
        return self._targets[key]

    def _send(self, method: str, target: _Target, content: bytes | None, timeout: float | None) -> tuple[bytes, int]:
        what = f"IMDS {method} {target.path}"
        if not self._plain_http:
            raise IMDSConnectionError(f"{what} failed: IMDS is plain HTTP, not {self._gets.base_url.scheme}")
        read = self.settings.timeout if timeout is None else timeout
        client = self._gets if content is None else self._posts
        request = client.build_request(
            method,
            target.url,
            content=content,
            headers=POST_HEADERS if content is not None else None,
            timeout=httpx.Timeout(read, connect=min(read, CONNECT_TIMEOUT_SECONDS)),
        )
        deadline = time.monotonic() + read  # the whole answer, not each read
        # A GET may wait up to 2 minutes (more if IMDS drips): a stop cuts it short. A POST is never cut:
        # whether IMDS took an approval must not depend on when a stop came (it is one --imds.timeout).
        stop = self._stop if content is None else None
        try:
            with within(deadline, stop):
                status, body = _fetch(client, request, deadline, what)
        except httpx.TransportError as exc:
            if stop is not None and stop.is_set():
                raise IMDSStopped(f"{what}: {STOPPED}") from None
            raise _as_imds_error(what, exc) from None
        if not 200 <= status < 300:
            raise IMDSHTTPError(status, _explain(method, target, status, body), body)
        return body, status


def _as_imds_error(what: str, exc: httpx.TransportError) -> IMDSError:
    if isinstance(exc, httpx.TimeoutException):
        detail = f": {exc}" if str(exc) and "timed out" not in str(exc) else f" ({type(exc).__name__})"
        return IMDSTimeout(f"{what} timed out{detail}")
    return IMDSConnectionError(f"{what} failed: {type(exc).__name__}: {_cause(exc)}")


_STALE = (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)


def _fetch(client: httpx.Client, request: httpx.Request, deadline: float, what: str) -> tuple[int, bytes]:
    """The answer's status and bounded body. A GET whose kept-alive connection turns out closed before a
    byte of the answer (the server closed it while idle, and its FIN crossed our request) is sent once more,
    on a new connection: httpcore sees such a connection only once the FIN has arrived."""
    opened: list[str] = []  # httpcore's trace events: "connection.connect_tcp.started" when it connects
    request.extensions["trace"] = lambda event, _info: opened.append(event) if "connect_tcp" in event else None
    try:
        answer = client.send(request, stream=True)
    except _STALE:
        if opened or request.method != "GET":
            raise
        answer = client.send(request, stream=True)  # a fresh connection (the stale one left the pool)
    try:
        return answer.status_code, read_body(answer, deadline, what)
    finally:
        answer.close()


def _cause(error: BaseException) -> str:
    """What failed underneath httpx's exception (the socket's ``ConnectionRefusedError``, say), with its words."""
    root = root_cause(error)
    return f"{type(root).__name__}: {root}" if isinstance(root, OSError) else str(error)


def _client(settings: ClientSettings, transport: httpx.BaseTransport) -> httpx.Client:
    return httpx.Client(
        base_url=settings.base_url,
        headers=REQUEST_HEADERS,
        transport=transport,
        trust_env=False,  # IMDS is never proxied: HTTP(S)_PROXY and NO_PROXY are not read
        follow_redirects=False,  # IMDS never redirects; whoever does is not IMDS
    )


def _explain(method: str, target: _Target, code: int, body: bytes) -> str:
    snippet = body[:200].decode("utf-8", "replace").strip()
    text = f"IMDS {method} {target.path} answered {code}: {snippet!r}"
    if code == 400:
        text += (
            " (IMDS rejects requests without the 'Metadata: true' header, without a valid api-version,"
            f" or with a malformed body; api-version was {target.api_version!r}; not retried)"
        )
    elif code == 429:
        text += " (throttled: IMDS allows 5 requests/s per VM)"
    elif code == 410:
        text += " (IMDS is not ready yet; retried for up to 70 s)"
    return text


class _Target(NamedTuple):
    path: str
    api_version: str
    url: httpx.URL  # the path and the query, joined to the base URL by the client
    attributes: dict[str, str | int]  # the HTTP client span's request attributes (semantic conventions)


def _make_target(base: httpx.URL, method: str, path: str, api_version: str) -> _Target:
    url = httpx.URL(path, params={"api-version": api_version})
    full = base.join(url)
    attributes: dict[str, str | int] = {
        "http.request.method": method,
        "url.full": str(full),
        "server.address": full.host,
    }
    if base.port is not None:
        attributes["server.port"] = base.port
    return _Target(path, api_version, url, attributes)


def _record_error(span: trace.Span, error: IMDSError) -> None:
    if isinstance(error, IMDSHTTPError):
        span.set_attribute("http.response.status_code", error.status_code)
        mark_error(span, str(error.status_code), str(error))
    else:
        mark_error(span, type(error).__name__, str(error))
