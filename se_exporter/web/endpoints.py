"""The HTTP endpoints: /metrics, the landing page, /-/healthy, /-/ready and /-/traffic, as one WSGI application."""

from __future__ import annotations

import html
from collections.abc import Callable, Iterable
from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

from prometheus_client import CollectorRegistry, make_wsgi_app

from se_exporter.config.values import HEALTHY_PATH, READY_PATH, TRAFFIC_PATH
from se_exporter.web.traffic import TrafficVerdict


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
