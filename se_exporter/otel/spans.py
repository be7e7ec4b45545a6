"""Spans for the OTLP exporters: the OpenTelemetry trace API, implemented for what se-exporter records.

Every poll makes two spans (the poll and its IMDS GET). The SDK's span machinery (sampler, limits
kept under locks, processors, its own metrics) cost about 250 us of CPU per poll measured cold, one
poll a second, a third of an idle exporter's; and its trace package 1.8 MiB of memory. What the
exporter needs is small: always sampled, the SDK's default limits (128 attributes, events and links
per span, attribute values as the API allows them), the API's context for parents, finished spans
handed to ``otel/span_batches.py``. ``otel/otlp_proto.py`` encodes these spans and the SDK's alike (its
tests compare both with the SDK's encoders); the console exporter still uses the SDK.
"""

from __future__ import annotations

import contextlib
import logging
import random
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags
from opentelemetry.util import types

log = logging.getLogger(__name__)
LIMIT = 128  # attributes, events and links per span; attributes per event or link (the SDK's defaults)
_SAMPLED = TraceFlags(TraceFlags.SAMPLED | TraceFlags.RANDOM_TRACE_ID)
_UNSET = Status(StatusCode.UNSET)
_UNSET_CODE, _OK = StatusCode.UNSET, StatusCode.OK
_SCALARS = (str, bool, int, float)


class Origin:
    """A resource or an instrumentation scope, as the encoder reads them."""

    def __init__(self, attributes: Mapping[str, Any], name: str = "", version: str | None = None) -> None:
        self.attributes = dict(attributes)
        self.name = name
        self.version = version
        self.schema_url = ""


class Event:
    __slots__ = ("attributes", "dropped_attributes", "name", "timestamp")

    def __init__(self, name: str, attributes: types.Attributes, timestamp: int) -> None:
        self.name = name
        self.timestamp = timestamp
        self.attributes, self.dropped_attributes = clean(attributes)


def clean(attributes: types.Attributes, kept: dict[str, Any] | None = None) -> tuple[dict[str, Any], int]:
    """``kept`` (or a new dict) with the valid ``attributes`` added (a sequence as a tuple), and how many
    older ones made room: at most ``LIMIT`` are kept, the newest, as the SDK keeps them."""
    kept = {} if kept is None else kept
    dropped = 0
    for key, value in (attributes or {}).items():
        if (valid := _valid(value)) is None or not key:
            log.warning("span attribute %r dropped: invalid type or empty key", key)
            continue
        if key not in kept and len(kept) >= LIMIT:
            del kept[next(iter(kept))]
            dropped += 1
        kept[key] = valid
    return kept, dropped


def _valid(value: Any) -> Any:
    if isinstance(value, _SCALARS):
        return value
    if isinstance(value, Sequence) and not isinstance(value, bytes):  # one type (None allowed)
        kinds = {type(item) for item in value if item is not None}
        if len(kinds) <= 1 and kinds <= set(_SCALARS):
            return tuple(value)
    return None


class Span(trace.Span):
    """A recording span; ``on_end`` receives it once ended. Not shared between threads while open."""

    def __init__(
        self,
        name: str,
        context: SpanContext,
        *,
        parent: SpanContext | None,
        kind: SpanKind,
        origin: tuple[Origin, Origin],
        on_end: Callable[[Span], None],
    ) -> None:
        self.name = name
        self._context = context
        self.parent = parent
        self.kind = kind
        self.resource, self.instrumentation_scope = origin
        self._on_end = on_end
        self.attributes: dict[str, Any] = {}
        self.dropped_attributes = 0
        self.events: list[Event] = []
        self.dropped_events = 0
        self.links: list[Link] = []
        self.dropped_links = 0
        self.status = _UNSET
        self.start_time = 0
        self.end_time: int | None = None

    def get_span_context(self) -> SpanContext:
        return self._context

    def is_recording(self) -> bool:
        return self.end_time is None

    def set_attributes(self, attributes: Mapping[str, types.AttributeValue]) -> None:
        if self.end_time is None:
            self.dropped_attributes += clean(attributes, self.attributes)[1]

    def set_attribute(self, key: str, value: types.AttributeValue) -> None:
        self.set_attributes({key: value})

    def add_event(self, name: str, attributes: types.Attributes = None, timestamp: int | None = None) -> None:
        if self.end_time is not None:
            return
        if len(self.events) >= LIMIT:  # the newest are kept, as the SDK keeps them
            del self.events[0]
            self.dropped_events += 1
        self.events.append(Event(name, attributes, timestamp or time.time_ns()))

    def add_link(self, context: SpanContext, attributes: types.Attributes = None) -> None:
        if self.end_time is not None or not context.is_valid:
            return
        if len(self.links) >= LIMIT:
            del self.links[0]
            self.dropped_links += 1
        self.links.append(Link(context, clean(attributes)[0]))

    def update_name(self, name: str) -> None:
        if self.end_time is None:
            self.name = name

    def set_status(self, status: Status | StatusCode, description: str | None = None) -> None:
        """As the SDK: OK is final, UNSET is ignored."""
        new = status if isinstance(status, Status) else Status(status, description)
        if self.end_time is None and self.status.status_code is not _OK and new.status_code is not _UNSET_CODE:
            self.status = new

    def record_exception(
        self,
        exception: BaseException,
        attributes: types.Attributes = None,
        timestamp: int | None = None,
        escaped: bool = False,
    ) -> None:
        kind = type(exception)
        module = kind.__module__
        recorded: dict[str, Any] = {
            "exception.type": f"{module}.{kind.__qualname__}" if module and module != "builtins" else kind.__qualname__,
            "exception.message": str(exception),
            "exception.stacktrace": "".join(traceback.format_exception(exception)),
            "exception.escaped": str(escaped),
        }
        self.add_event("exception", {**recorded, **(attributes or {})}, timestamp)

    def end(self, end_time: int | None = None) -> None:
        if self.end_time is None:
            self.end_time = end_time or time.time_ns()
            self._on_end(self)


class Tracer(trace.Tracer):
    def __init__(self, origin: tuple[Origin, Origin], on_end: Callable[[Span], None], ids: random.Random) -> None:
        self._origin = origin
        self._on_end = on_end
        self._ids = ids

    def start_span(  # noqa: PLR0917  # the API's signature
        self,
        name: str,
        context: Context | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: types.Attributes = None,
        links: Sequence[Link] | None = (),
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
    ) -> Span:
        parent: SpanContext | None = trace.get_current_span(context).get_span_context()
        if parent is None or not parent.is_valid:
            parent, trace_id = None, self._ids.getrandbits(128) or 1
        else:
            trace_id = parent.trace_id
        own = SpanContext(trace_id, self._ids.getrandbits(64) or 1, False, _SAMPLED)
        span = Span(name, own, parent=parent, kind=kind, origin=self._origin, on_end=self._on_end)
        span.set_attributes(attributes or {})
        for link in links or ():
            span.add_link(link.context, link.attributes)
        span.start_time = start_time or time.time_ns()
        return span

    @contextlib.contextmanager
    def start_as_current_span(  # type: ignore[override]  # noqa: PLR0917  # the API's, with contextlib's decorator
        self,
        name: str,
        context: Context | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: types.Attributes = None,
        links: Sequence[Link] | None = (),
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
        end_on_exit: bool = True,
    ) -> Iterator[Span]:
        span = self.start_span(name, context, kind, attributes, links, start_time)
        with trace.use_span(span, end_on_exit, record_exception, set_status_on_exception):
            yield span


class TracerProvider(trace.TracerProvider):
    """Tracers whose ended spans go to ``on_end`` (a ``SpanBatches``), all with one resource."""

    def __init__(self, resource: Mapping[str, Any], on_end: Callable[[Span], None]) -> None:
        self._resource = Origin(resource)
        self._on_end = on_end
        self._ids = random.Random()  # noqa: S311  # span ids are not secrets (the SDK's are random too)
        self._scopes: dict[tuple[str, str | None], Origin] = {}

    def get_tracer(
        self,
        instrumenting_module_name: str,
        instrumenting_library_version: str | None = None,
        schema_url: str | None = None,
        attributes: types.Attributes = None,
    ) -> Tracer:
        key = (instrumenting_module_name, instrumenting_library_version)
        scope = self._scopes.setdefault(key, Origin(attributes or {}, *key))
        return Tracer((self._resource, scope), self._on_end, self._ids)
