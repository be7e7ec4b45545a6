"""HTTP client for the Instance Metadata Service: Scheduled Events and compute metadata.

One long-lived transport (``imds.transport``: kept-alive connections), called directly: IMDS needs no
cookies, auth or redirects, and each endpoint's request is built once. Proxies are bypassed on purpose
(the transport never uses one): IMDS is link-local and rejects proxied requests. Every request passes
the shared rate limiter, is timed into ``on_response`` (the metrics) and traced as an HTTP client span.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, NamedTuple

from se_exporter import __version__
from se_exporter.common.tracing import client_kind, mark_error
from se_exporter.errors import IMDSConnectionError, IMDSError, IMDSHTTPError, IMDSTimeout
from se_exporter.imds.body import read_body
from se_exporter.imds.document import Document, parse_document
from se_exporter.imds.identity import VMIdentity, parse_compute
from se_exporter.imds.pacing import RateLimiter
from se_exporter.imds.transport import ConnectTimeout, IMDSTransport, ReadTimeout, Request, Transport, TransportError

if TYPE_CHECKING:
    from opentelemetry import trace

EVENTS_PATH = "/metadata/scheduledevents"
COMPUTE_PATH = "/metadata/instance/compute"
COMPUTE_API_VERSION = "2021-02-01"

REQUEST_HEADERS = {"Metadata": "true", "Accept": "application/json", "User-Agent": f"se-exporter/{__version__}"}
POST_HEADERS = {**REQUEST_HEADERS, "Content-Type": "application/json"}
ResponseObserver = Callable[[str, str, float], None]  # method, HTTP code or "error", seconds


@dataclass(frozen=True, slots=True)
class ClientSettings:
    base_url: str = "http://169.254.169.254"
    api_version: str = "2020-07-01"
    timeout: float = 5.0
    # Microsoft: the first call after Scheduled Events is enabled may take up to 2 minutes.
    first_call_timeout: float = 120.0


class IMDSClient:
    def __init__(
        self,
        settings: ClientSettings,
        limiter: RateLimiter,
        *,
        transport: Transport | None = None,
        on_response: ResponseObserver | None = None,
        tracer: trace.Tracer | None = None,
    ) -> None:
        self.settings = settings
        self._limiter = limiter
        self._on_response = on_response or (lambda _m, _c, _s: None)
        self._tracer = tracer  # None: no spans (OpenTelemetry is not even imported)
        self._answered_once = False
        self._last_body: bytes | None = None
        self._last_document: Document | None = None
        self._targets: dict[tuple[str, str, str], _Target] = {}
        self._base_url = urllib.parse.urlsplit(settings.base_url)
        self._transport = transport or IMDSTransport()
        self._waiting: set[int] = set()  # threads with a request in flight (see ``is_waiting``)

    def close(self) -> None:
        self._transport.close()

    def is_waiting(self, thread_id: int) -> bool:
        """Whether that thread waits on IMDS now: a stop request may then cut the request short, since IMDS
        may take up to 2 minutes to answer (more if it drips) and a service stop must not wait that long."""
        return thread_id in self._waiting

    def get_document(self) -> Document:
        timeout = self.settings.timeout if self._answered_once else self.settings.first_call_timeout
        body = self._request("GET", EVENTS_PATH, self.settings.api_version, timeout=timeout)
        self._answered_once = True
        if body != self._last_body or self._last_document is None:  # most polls repeat the last answer
            self._last_document = parse_document(body)
            self._last_body = body
        return self._last_document

    def get_identity(self) -> VMIdentity:
        return parse_compute(self._request("GET", COMPUTE_PATH, COMPUTE_API_VERSION))

    def approve(self, event_ids: Sequence[str]) -> None:
        """POST StartRequests once. Retries are the approver's (approval.poster): each one follows a fresh
        decision on the latest document, which a retry loop in here could not make."""
        payload = json.dumps({"StartRequests": [{"EventId": event_id} for event_id in event_ids]})
        self._request("POST", EVENTS_PATH, self.settings.api_version, content=payload.encode())

    def _request(
        self, method: str, path: str, api_version: str, *, content: bytes | None = None, timeout: float | None = None
    ) -> bytes:
        self._limiter.acquire()
        target = self._target(method, path, api_version)
        if self._tracer is None:
            return self._exchange(method, target, content, timeout, None)
        with self._tracer.start_as_current_span(method, kind=client_kind(), attributes=target.attributes) as span:
            return self._exchange(method, target, content, timeout, span)

    def _exchange(
        self, method: str, target: _Target, content: bytes | None, timeout: float | None, span: trace.Span | None
    ) -> bytes:
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
        # Built once per endpoint: parsing URLs and building requests was a third of an idle poll's cost.
        key = (method, path, api_version)
        if key not in self._targets:
            self._targets[key] = _make_target(self._base_url, method, path, api_version)
        return self._targets[key]

    def _send(self, method: str, target: _Target, content: bytes | None, timeout: float | None) -> tuple[bytes, int]:
        if target.request is None:
            raise IMDSConnectionError(
                f"IMDS {method} {target.path} failed: IMDS is plain HTTP, not {self._base_url.scheme}"
            )
        request = target.request if content is None else replace(target.request, headers=POST_HEADERS, body=content)
        deadline = time.monotonic() + (self.settings.timeout if timeout is None else timeout)  # the whole answer
        self._waiting.add(threading.get_ident())
        try:
            answer = self._transport.send(request, deadline)
            try:
                body = read_body(answer, deadline, f"IMDS {method} {target.path}")
            finally:
                answer.close()
        except (ReadTimeout, ConnectTimeout) as exc:
            detail = f": {exc}" if str(exc) and "timed out" not in str(exc) else f" ({type(exc).__name__})"
            raise IMDSTimeout(f"IMDS {method} {target.path} timed out{detail}") from None
        except TransportError as exc:
            raise IMDSConnectionError(f"IMDS {method} {target.path} failed: {type(exc).__name__}: {exc}") from None
        finally:
            self._waiting.discard(threading.get_ident())
        if not 200 <= answer.status < 300:
            raise IMDSHTTPError(answer.status, _explain(method, target, answer.status, body))
        return body, answer.status


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
    request: Request | None  # None: not a plain-HTTP base URL
    attributes: dict[str, str | int]  # the HTTP client span's request attributes (semantic conventions)


def _make_target(base: urllib.parse.SplitResult, method: str, path: str, api_version: str) -> _Target:
    query = urllib.parse.urlencode({"api-version": api_version})
    host, port = base.hostname or "", base.port or 80
    attributes: dict[str, str | int] = {
        "http.request.method": method,
        "url.full": urllib.parse.urlunsplit((base.scheme, base.netloc, path, query, "")),
        "server.address": host,
    }
    if base.port is not None:
        attributes["server.port"] = base.port
    request = Request(method, host, port, f"{path}?{query}", REQUEST_HEADERS) if base.scheme == "http" else None
    return _Target(path, api_version, request, attributes)


def _record_error(span: trace.Span, error: IMDSError) -> None:
    if isinstance(error, IMDSHTTPError):
        span.set_attribute("http.response.status_code", error.status_code)
        mark_error(span, str(error.status_code), str(error))
    else:
        mark_error(span, type(error).__name__, str(error))
