"""What the HTTP and gRPC OTLP test receivers share: lifecycle, failure injection, the answer.

Outage controls: :meth:`OTLPReceiver.set_unavailable` (HTTP 503 / gRPC UNAVAILABLE),
:meth:`OTLPReceiver.set_failure` (any status, optionally for the next N requests only),
:meth:`OTLPReceiver.set_partial_success`, :meth:`OTLPReceiver.stop` (the port is closed, open
keep-alive connections are cut) and :meth:`OTLPReceiver.start` (listens again on the *same* port).

Everything binds to 127.0.0.1 only.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import ClassVar, Final, TypeVar

import grpc
from google.protobuf.message import Message
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from .records import ReceivedLog, ReceivedSpan, RequestRecord
from .store import TelemetryStore

LOOPBACK: Final = "127.0.0.1"

REQUEST_TYPES: Final[dict[str, type[Message]]] = {
    "traces": trace_service_pb2.ExportTraceServiceRequest,
    "logs": logs_service_pb2.ExportLogsServiceRequest,
}
"""The signals the product sends, and the request each arrives in."""


@dataclass
class Failure:
    """How to reject requests while a failure is set."""

    http_status: int = 503
    grpc_code: grpc.StatusCode = grpc.StatusCode.UNAVAILABLE
    retry_after: float | None = None
    """Seconds; sent as HTTP ``Retry-After`` and gRPC ``google.rpc.RetryInfo`` (both honoured by the
    OTel Python exporters, so ``0`` makes them retry immediately)."""
    remaining: int | None = None
    """Reject only this many more requests, then accept again; ``None`` = until cleared."""
    message: str = "receiver unavailable (test)"


_R = TypeVar("_R", bound="OTLPReceiver")


class OTLPReceiver:
    """Common part of the HTTP and gRPC receivers: store access, failure injection, lifecycle."""

    protocol: ClassVar[str]
    """Value for ``OTEL_EXPORTER_OTLP_PROTOCOL``."""

    def __init__(self, store: TelemetryStore | None = None, *, port: int = 0) -> None:
        self.store = store if store is not None else TelemetryStore()
        self.wait_for_logs = self.store.wait_for_logs
        self.wait_for_spans = self.store.wait_for_spans
        self.wait_for_requests = self.store.wait_for_requests
        self.clear = self.store.clear
        self._port = port
        self._lock = threading.Lock()
        self._failure: Failure | None = None
        self._partial: str | None = None
        self._running = False

    def start(self) -> OTLPReceiver:
        """Listen on 127.0.0.1; the first start picks a free port, later starts reuse it."""
        with self._lock:
            if not self._running:
                self._port = self._bind_and_serve(self._port)
                self._running = True
        return self

    def stop(self) -> None:
        """Close the listening socket and every open connection. Idempotent."""
        with self._lock:
            if self._running:
                self._running = False
                self._shutdown()

    def restart(self) -> None:
        self.stop()
        self.start()

    def __enter__(self: _R) -> _R:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _bind_and_serve(self, port: int) -> int:
        raise NotImplementedError

    def _shutdown(self) -> None:
        raise NotImplementedError

    @property
    def running(self) -> bool:
        return self._running

    @property
    def port(self) -> int:
        if not self._port:
            raise RuntimeError("receiver was never started")
        return self._port

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:PORT`` (gRPC too: the ``http`` scheme means insecure)."""
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        """Environment to point an OTel SDK (or the exporter under test) at this receiver.

        Also adds 127.0.0.1 to ``NO_PROXY``/``no_proxy`` (both ``requests`` and gRPC honour
        ``HTTP(S)_PROXY``), keeping whatever the current environment already lists.
        """
        listed = os.environ.get("NO_PROXY") or os.environ.get("no_proxy")
        no_proxy = ",".join(v for v in (listed, "127.0.0.1,localhost") if v)
        return {
            "OTEL_EXPORTER_OTLP_ENDPOINT": self.endpoint,
            "OTEL_EXPORTER_OTLP_PROTOCOL": self.protocol,
            "NO_PROXY": no_proxy,
            "no_proxy": no_proxy,
        }

    def set_unavailable(self, unavailable: bool = True, *, retry_after: float | None = None) -> None:
        """``True``: answer HTTP 503 / gRPC UNAVAILABLE (retryable) to every request until reset."""
        self.set_failure(Failure(retry_after=retry_after) if unavailable else None)

    def set_failure(self, failure: Failure | None) -> None:
        """Reject requests as described (``None`` clears), e.g. ``Failure(400, INVALID_ARGUMENT)``
        for a non-retryable error or ``Failure(remaining=1, retry_after=0)`` for one transient error."""
        with self._lock:
            self._failure = failure

    def set_partial_success(self, message: str | None) -> None:
        """Take every request but reject all it holds, with ``message`` (a partial success); None clears."""
        with self._lock:
            self._partial = message

    def take_failure(self) -> Failure | None:
        """The failure to answer this request with, if one is set (counting down ``remaining``)."""
        with self._lock:
            failure = self._failure
            if failure is not None and failure.remaining is not None:
                failure.remaining -= 1
                if failure.remaining <= 0:
                    self._failure = None
            return failure

    def response(self, request: Message) -> Message:
        """The answer to a request taken: empty, or a partial success rejecting every item in it."""
        with self._lock:
            partial = self._partial
        if isinstance(request, logs_service_pb2.ExportLogsServiceRequest):
            logs = logs_service_pb2.ExportLogsServiceResponse()
            if partial is not None:
                logs.partial_success.rejected_log_records = sum(
                    len(scope.log_records) for resource in request.resource_logs for scope in resource.scope_logs
                )
                logs.partial_success.error_message = partial
            return logs
        traces = trace_service_pb2.ExportTraceServiceResponse()
        if partial is not None and isinstance(request, trace_service_pb2.ExportTraceServiceRequest):
            traces.partial_success.rejected_spans = sum(
                len(scope.spans) for resource in request.resource_spans for scope in resource.scope_spans
            )
            traces.partial_success.error_message = partial
        return traces

    @property
    def logs(self) -> list[ReceivedLog]:
        return self.store.logs

    @property
    def spans(self) -> list[ReceivedSpan]:
        return self.store.spans

    @property
    def requests(self) -> list[RequestRecord]:
        return self.store.requests

    @property
    def accepted_requests(self) -> int:
        """Requests this receiver accepted (the store may be shared with the other transport)."""
        return self.store.count_requests(accepted=True, transport=self._transport)

    @property
    def rejected_requests(self) -> int:
        """Requests this receiver rejected (failure injection, bad path, type or body)."""
        return self.store.count_requests(accepted=False, transport=self._transport)

    @property
    def _transport(self) -> str:
        return "grpc" if self.protocol == "grpc" else "http"

    def __repr__(self) -> str:
        state = "running" if self._running else "stopped"
        return f"<{type(self).__name__} {self.protocol} {LOOPBACK}:{self._port or '?'} {state}>"
