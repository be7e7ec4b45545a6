"""The thread-safe store the OTLP test receivers feed, and the one way tests wait on it.

Every request taken or refused notifies waiters: :meth:`TelemetryStore.wait_for` blocks on the
store's Condition until enough matching items are there or the deadline passes, then raises
:class:`ReceiverTimeout` (an ``AssertionError``) describing what was received.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Final, TypeVar

from google.protobuf.message import Message
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from .records import AttrValue, ReceivedLog, ReceivedSpan, RequestRecord, flatten_logs, flatten_spans, matches

DEFAULT_TIMEOUT: Final = 10.0

_T = TypeVar("_T")


class ReceiverTimeout(AssertionError):
    """Raised when a wait's deadline passes; the message lists what was received."""


class TelemetryStore:
    """Thread-safe store shared by receivers; every mutation notifies waiters."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._logs: list[ReceivedLog] = []
        self._spans: list[ReceivedSpan] = []
        self._requests: list[RequestRecord] = []
        self.raw_requests: list[Message] = []
        """Every accepted request message, as decoded, for anything the flattening drops."""

    def ingest(
        self,
        signal: str,
        message: Message,
        *,
        protocol: str,
        headers: Mapping[str, str],
        content_type: str = "",
        content_encoding: str = "",
    ) -> None:
        """Take an accepted request: flatten it and wake the waiters."""
        logs: list[ReceivedLog] = []
        spans: list[ReceivedSpan] = []
        if isinstance(message, logs_service_pb2.ExportLogsServiceRequest):
            logs = flatten_logs(message, protocol)
        elif isinstance(message, trace_service_pb2.ExportTraceServiceRequest):
            spans = flatten_spans(message, protocol)
        else:
            raise TypeError(f"unexpected message {type(message).__name__}")
        status: int | str = 200 if protocol.startswith("http") else "OK"
        record = RequestRecord(
            signal,
            protocol,
            True,
            status,
            dict(headers),
            content_type,
            content_encoding,
            len(logs) + len(spans),
            time.monotonic(),
        )
        with self._cond:
            self._logs.extend(logs)
            self._spans.extend(spans)
            self.raw_requests.append(message)
            self._requests.append(record)
            self._cond.notify_all()

    def record_rejected(
        self,
        signal: str,
        *,
        protocol: str,
        status: int | str,
        headers: Mapping[str, str],
        content_type: str = "",
        content_encoding: str = "",
        message: Message | None = None,
    ) -> None:
        """Remember a refused request; its records (``message``, when it could be decoded) are counted, not kept."""
        items = 0
        if isinstance(message, logs_service_pb2.ExportLogsServiceRequest):
            items = len(flatten_logs(message, protocol))
        elif isinstance(message, trace_service_pb2.ExportTraceServiceRequest):
            items = len(flatten_spans(message, protocol))
        record = RequestRecord(
            signal, protocol, False, status, dict(headers), content_type, content_encoding, items, time.monotonic()
        )
        with self._cond:
            self._requests.append(record)
            self._cond.notify_all()

    @property
    def logs(self) -> list[ReceivedLog]:
        with self._cond:
            return list(self._logs)

    @property
    def spans(self) -> list[ReceivedSpan]:
        with self._cond:
            return list(self._spans)

    @property
    def requests(self) -> list[RequestRecord]:
        with self._cond:
            return list(self._requests)

    def count_requests(
        self, signal: str | None = None, *, accepted: bool | None = None, transport: str | None = None
    ) -> int:
        """Count requests; ``transport`` is ``"http"`` or ``"grpc"`` (``None``: both)."""
        return len(self.find_requests(signal=signal, accepted=accepted, transport=transport))

    def clear(self) -> None:
        with self._cond:
            self._logs.clear()
            self._spans.clear()
            self._requests.clear()
            self.raw_requests.clear()
            self._cond.notify_all()

    def find_logs(
        self,
        predicate: Callable[[ReceivedLog], bool] | None = None,
        *,
        event_name: str | None = None,
        attributes: Mapping[str, AttrValue] | None = None,
    ) -> list[ReceivedLog]:
        """Logs received so far that match every given criterion (``attributes`` is a subset match)."""
        return [
            log
            for log in self.logs
            if (event_name is None or log.event_name == event_name)
            and matches(log.attributes, attributes)
            and (predicate is None or predicate(log))
        ]

    def find_spans(
        self,
        predicate: Callable[[ReceivedSpan], bool] | None = None,
        *,
        name: str | None = None,
        attributes: Mapping[str, AttrValue] | None = None,
    ) -> list[ReceivedSpan]:
        """Spans received so far that match every given criterion (``attributes`` is a subset match)."""
        return [
            span
            for span in self.spans
            if (name is None or span.name == name)
            and matches(span.attributes, attributes)
            and (predicate is None or predicate(span))
        ]

    def find_requests(
        self,
        predicate: Callable[[RequestRecord], bool] | None = None,
        *,
        signal: str | None = None,
        accepted: bool | None = None,
        transport: str | None = None,
    ) -> list[RequestRecord]:
        """Requests (taken or refused) that match every given criterion."""
        return [
            request
            for request in self.requests
            if (signal is None or request.signal == signal)
            and (accepted is None or request.accepted == accepted)
            and (transport is None or request.protocol.startswith(transport))
            and (predicate is None or predicate(request))
        ]

    def wait_for(
        self, find: Callable[[], list[_T]], *, count: int = 1, timeout: float = DEFAULT_TIMEOUT, what: str = "item(s)"
    ) -> list[_T]:
        """Wait until ``find()`` returns at least ``count`` items (re-run after each request); return them.

        ``find`` runs under the store's lock: it may read the store but must not block.
        """
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(found := find()) < count:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise ReceiverTimeout(
                        f"expected >= {count} {what}, got {len(found)} within {timeout:.1f}s\n{self._describe()}"
                    )
                self._cond.wait(remaining)
        return found

    def wait_for_logs(
        self,
        predicate: Callable[[ReceivedLog], bool] | None = None,
        *,
        event_name: str | None = None,
        attributes: Mapping[str, AttrValue] | None = None,
        count: int = 1,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> list[ReceivedLog]:
        """Wait until at least ``count`` matching logs were received; return all matching logs."""
        return self.wait_for(
            lambda: self.find_logs(predicate, event_name=event_name, attributes=attributes),
            count=count,
            timeout=timeout,
            what=f"log(s) (event_name={event_name!r}, attributes={attributes!r})",
        )

    def wait_for_spans(
        self,
        predicate: Callable[[ReceivedSpan], bool] | None = None,
        *,
        name: str | None = None,
        attributes: Mapping[str, AttrValue] | None = None,
        count: int = 1,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> list[ReceivedSpan]:
        """Wait until at least ``count`` matching spans were received; return all matching spans."""
        return self.wait_for(
            lambda: self.find_spans(predicate, name=name, attributes=attributes),
            count=count,
            timeout=timeout,
            what=f"span(s) (name={name!r}, attributes={attributes!r})",
        )

    def wait_for_requests(
        self,
        predicate: Callable[[RequestRecord], bool] | None = None,
        *,
        signal: str | None = None,
        accepted: bool | None = None,
        count: int = 1,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> list[RequestRecord]:
        """Wait until at least ``count`` matching requests (taken or refused) arrived."""
        return self.wait_for(
            lambda: self.find_requests(predicate, signal=signal, accepted=accepted),
            count=count,
            timeout=timeout,
            what=f"request(s) (signal={signal!r}, accepted={accepted!r})",
        )

    def _describe(self, limit: int = 20) -> str:
        """What was received, for a timeout's message (the caller holds the lock)."""
        requests = self._requests
        lines = [
            f"received: {len(self._logs)} log(s), {len(self._spans)} span(s); requests: "
            f"{sum(r.accepted for r in requests)} accepted, {sum(not r.accepted for r in requests)} rejected"
        ]
        lines += [
            f"  log {log.event_name or '-'} sev={log.severity_text or log.severity_number} "
            f"body={log.body!r} attrs={log.attributes!r}"
            for log in self._logs[-limit:]
        ]
        lines += [f"  span {span.name} attrs={span.attributes!r}" for span in self._spans[-limit:]]
        return "\n".join(lines)
