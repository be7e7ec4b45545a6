"""The reference: the design's stack used plainly, as a user would write it in an afternoon instead of
installing se-exporter.

httpx polls IMDS once a second; prometheus_client gauges, served by ``start_http_server``; the OpenTelemetry
SDK makes a span per poll and a log record per transition, through its batch processors and the official
OTLP/HTTP exporters (configured by the ``OTEL_*`` variables; without ``OTEL_EXPORTER_OTLP_ENDPOINT``, or with
``OTEL_SDK_DISABLED=true``, the SDK is not imported at all, as for the exporter). No bounds, no state file,
no retries of its own: the libraries' defaults.

    python benchmarks/reference_stack.py http://127.0.0.1:8080 [--port 9100] [--interval 1]
"""

import argparse
import contextlib
import logging
import os
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import httpx
from prometheus_client import Gauge, start_http_server

API_VERSION = "2020-07-01"

PENDING = Gauge("scheduled_events_pending", "Events listed", ["event_type", "event_status"])
INFO = Gauge("scheduled_event_info", "One per listed event", ["event_id", "event_type", "event_status"])
UNTIL = Gauge("scheduled_event_seconds_until_not_before", "NotBefore - now", ["event_id", "event_type"])
INCARNATION = Gauge("scheduled_events_document_incarnation", "DocumentIncarnation")
UP = Gauge("scheduled_events_imds_up", "1 if the last poll succeeded")


def set_up_opentelemetry() -> tuple[logging.Logger, Callable[[str], AbstractContextManager[Any]]]:
    """The log record handler and the span of a poll; without an OTLP endpoint (or with the SDK disabled) the
    SDK is not even imported, as a user's script would do."""
    logger = logging.getLogger("scheduled_events")
    logger.setLevel(logging.INFO)
    wanted = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") and os.environ.get("OTEL_SDK_DISABLED") != "true"
    if not wanted:
        return logger, lambda _name: contextlib.nullcontext()
    from opentelemetry import trace
    from opentelemetry._logs import set_logger_provider
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk._logs import LoggerProvider, LoggingHandler
    from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(tracer_provider)
    logger_provider = LoggerProvider()
    logger_provider.add_log_record_processor(BatchLogRecordProcessor(OTLPLogExporter()))
    set_logger_provider(logger_provider)
    logger.addHandler(LoggingHandler(logger_provider=logger_provider))
    return logger, trace.get_tracer("scheduled_events").start_as_current_span


def parse_not_before(text: str) -> float | None:
    if not text:
        return None
    return time.mktime(time.strptime(text, "%a, %d %b %Y %H:%M:%S GMT")) - time.timezone


def show(document: dict[str, Any], seen: dict[str, Any], logger: logging.Logger) -> dict[str, Any]:
    events = {event["EventId"]: event for event in document["Events"]}
    INCARNATION.set(document["DocumentIncarnation"])
    PENDING.clear()
    INFO.clear()
    UNTIL.clear()
    for event_id, event in events.items():
        PENDING.labels(event["EventType"], event["EventStatus"]).inc()
        INFO.labels(event_id, event["EventType"], event["EventStatus"]).set(1)
        not_before = parse_not_before(event.get("NotBefore", ""))
        if not_before is not None:
            UNTIL.labels(event_id, event["EventType"]).set(not_before - time.time())
        before = seen.get(event_id)
        if before is None or before["EventStatus"] != event["EventStatus"]:
            logger.info("%s %s", event["EventType"], event["EventStatus"], extra={"event_id": event_id})
    for event_id, event in seen.items():
        if event_id not in events:
            logger.info("%s completed", event["EventType"], extra={"event_id": event_id})
    return events


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("base_url", nargs="?", default="http://169.254.169.254")
    parser.add_argument("--port", type=int, default=9100)
    parser.add_argument("--interval", type=float, default=1.0)
    args = parser.parse_args()
    logger, span = set_up_opentelemetry()
    server, _ = start_http_server(args.port, addr="127.0.0.1")
    print(f"listening on http://127.0.0.1:{server.server_address[1]}/", flush=True)
    url = f"{args.base_url.rstrip('/')}/metadata/scheduledevents?api-version={API_VERSION}"
    seen: dict[str, Any] = {}
    answered = False
    with httpx.Client(headers={"Metadata": "true"}, trust_env=False) as client:
        while True:
            with span("poll"):
                try:
                    document = client.get(url).raise_for_status().json()
                except (httpx.HTTPError, ValueError) as error:
                    UP.set(0)
                    print(f"error: {error}", flush=True)
                else:
                    UP.set(1)
                    if not answered:
                        answered = True
                        print(f"first document: {document['DocumentIncarnation']}", flush=True)
                    seen = show(document, seen, logger)
            time.sleep(args.interval)


if __name__ == "__main__":
    main()
