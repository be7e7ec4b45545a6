"""The HTTP endpoints: /metrics, the landing page, /-/healthy, /-/ready and /-/traffic, as one WSGI application,
and ``HTTPAnswer``, what the server writes back (``call_app`` runs the application into one).

``/-/traffic``: whether a load balancer should send this VM traffic, read from the store at request time.
503 from ``lead`` seconds before the NotBefore of an event that affects this VM and whose impact is one of
``impacts``, while such an event is Started, and until it is gone (a Scheduled one without a NotBefore may
start at any moment: 503 too); 200 otherwise. In a status Azure may add (a Reboot ``Paused``), such an event
counts as a Scheduled one: its NotBefore and the lead time decide, and with no NotBefore it keeps the VM out,
because nothing says it is not under way (docs/actions.md). A Spot eviction-risk notice (impact
``eviction_risk``) is not one of the default impacts: nothing is lost yet. The body says why. Only an event
known to list this VM counts: while the VM's name is unknown no event does, because every VM of an
availability set or scale set sees the same events, and taking them all out of the load balancer at once
would be the outage the probe is there to avoid. The same holds before the first IMDS answer: nothing is
known, so traffic flows.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from typing import Any
from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

from prometheus_client import CollectorRegistry, make_wsgi_app

from se_exporter.config.values import HEALTHY_PATH, READY_PATH, TRAFFIC_PATH
from se_exporter.imds.document import SCHEDULED, STARTED, VMIdentity
from se_exporter.lifecycle import EventStore
from se_exporter.lifecycle.transitions import EventState


@dataclass(frozen=True, slots=True)
class TrafficVerdict:
    takes_traffic: bool
    reason: str  # one line per event that keeps the VM out, or why traffic flows


class TrafficGate:
    def __init__(
        self,
        store: EventStore,
        identity: Callable[[], VMIdentity],
        *,
        lead_seconds: float,
        impacts: Collection[str],
        clock: Callable[[], float],
    ) -> None:
        self._store, self._identity, self._clock = store, identity, clock
        self._lead, self._impacts = lead_seconds, frozenset(impacts)

    def verdict(self) -> TrafficVerdict:
        now, identity = self._clock(), self._identity()
        reasons = [
            reason
            for state in self._store.events.values()  # an immutable snapshot: no lock
            if (reason := self._keeps_out(state, identity, now)) is not None
        ]
        if reasons:
            return TrafficVerdict(False, "\n".join(reasons))
        who = f"{identity.name}" if identity.name else "this VM (its name is not known yet)"
        if self._store.last_look is None:  # a first start: Azure may take up to 2 minutes to answer at all
            return TrafficVerdict(True, f"{who} may take traffic: IMDS has not answered yet")
        return TrafficVerdict(True, f"{who} may take traffic: no {'/'.join(sorted(self._impacts))} event due")

    def _keeps_out(self, state: EventState, identity: VMIdentity, now: float) -> str | None:
        event = state.event
        if state.impact not in self._impacts or identity.affects(event.resources) is not True:
            return None
        what = f"{event.event_type} {event.event_id} (impact {state.impact}, cause {state.cause})"
        if event.event_status == STARTED:
            return f"{what} is Started"
        if event.not_before is None and event.event_status == SCHEDULED:
            return f"{what} is {event.event_status} with no NotBefore: it may start at any moment"
        if event.not_before is None:
            return (
                f"{what} is {event.event_status}, a status se-exporter does not know, with no NotBefore: "
                "it may be under way or start at any moment"
            )
        left = event.not_before.timestamp() - now
        if left <= self._lead:
            return f"{what} starts in {max(0, round(left))} s (NotBefore {event.not_before.isoformat()})"
        return None


def make_app(
    registry: CollectorRegistry,  # what /metrics shows, collected at each scrape
    telemetry_path: str,
    ready: Callable[[], bool | str],  # True, or why not (False: no successful IMDS poll yet)
    version: str,
    traffic: Callable[[], TrafficVerdict] | None = None,
) -> WSGIApplication:
    metrics_app = make_wsgi_app(registry)  # content negotiation, OpenMetrics, gzip and name[] filters included
    landing = _landing_page(telemetry_path, version).encode()

    def readiness() -> tuple[str, str]:
        verdict = ready()
        if verdict is True:
            return "200 OK", "Ready"
        return "503 Service Unavailable", verdict or "Not ready: no successful IMDS poll yet"

    def traffic_answer() -> tuple[str, str]:
        verdict = traffic() if traffic is not None else TrafficVerdict(True, "no traffic gate")
        return ("200 OK" if verdict.takes_traffic else "503 Service Unavailable"), verdict.reason

    plain: dict[str, Callable[[], tuple[str, str]]] = {
        HEALTHY_PATH: lambda: ("200 OK", "Healthy"),
        READY_PATH: readiness,
        TRAFFIC_PATH: traffic_answer,
    }

    def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO") or "/"
        if path == telemetry_path:
            environ["HTTP_ACCEPT"] = prefer_text_format(environ.get("HTTP_ACCEPT", ""))
            body: Iterable[bytes] = metrics_app(environ, start_response)
            return body
        if (answer := plain.get(path)) is not None:
            status, text = answer()
            return _text(start_response, status, text + "\n")
        if path == "/":
            start_response("200 OK", [("Content-Type", "text/html; charset=utf-8")])
            return [landing]
        return _text(start_response, "404 Not Found", "Not found\n")

    return app


def prefer_text_format(accept: str) -> str:
    """Narrow an Accept header to the Prometheus text format whenever the client accepts it.

    Prometheus offers OpenMetrics first and text 0.0.4 as a fallback; like node_exporter (promhttp's
    default), we answer in text, which takes less CPU to write and to parse (BENCHMARKS.md) and which
    loses nothing here: no exemplars, no _created series. A client that accepts only OpenMetrics gets it.
    """
    text = [kind for kind in accept.split(",") if kind.split(";")[0].strip() in ("text/plain", "*/*")]
    return ",".join(text) if text else accept


def _text(start_response: StartResponse, status: str, body: str) -> list[bytes]:
    start_response(status, [("Content-Type", "text/plain; charset=utf-8")])
    return [body.encode()]


def _landing_page(telemetry_path: str, version: str) -> str:
    path = html.escape(telemetry_path)
    return f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>Azure Scheduled Events Exporter</title></head>
<body>
<h1>Azure Scheduled Events Exporter</h1>
<p>se-exporter {html.escape(version)}: Azure maintenance events from IMDS as Prometheus metrics.</p>
<ul>
<li><a href="{path}">Metrics</a></li>
<li><a href="{HEALTHY_PATH}">Health</a></li>
<li><a href="{READY_PATH}">Readiness</a> (ready after the first successful IMDS poll)</li>
<li><a href="{TRAFFIC_PATH}">Traffic</a> (503 while a disruptive event for this VM is near: for a load balancer)</li>
</ul>
</body></html>
"""


Headers = list[tuple[str, str]]


@dataclass(frozen=True, slots=True)
class HTTPAnswer:
    status: int
    reason: str
    headers: Headers
    body: bytes


def plain(status: int, text: str) -> HTTPAnswer:
    reasons = {400: "Bad Request", 413: "Content Too Large", 431: "Request Header Fields Too Large"}
    return HTTPAnswer(
        status,
        reasons.get(status, "Bad Request"),
        [("Content-Type", "text/plain; charset=utf-8")],
        f"{text}\n".encode(),
    )


def call_app(app: WSGIApplication, environ: dict[str, Any]) -> HTTPAnswer:
    """The WSGI application's answer to one request, its body joined."""
    started: list[tuple[str, Headers]] = []

    def start_response(status: str, headers: Headers, exc_info: Any = None) -> Callable[[bytes], object]:
        started[:] = [(status, list(headers))]
        return lambda _data: None

    result = app(environ, start_response)
    try:
        body = b"".join(result)
    finally:
        if hasattr(result, "close"):
            result.close()
    status, headers = started[0]
    code, _, reason = status.partition(" ")
    return HTTPAnswer(int(code), reason, headers, body)
