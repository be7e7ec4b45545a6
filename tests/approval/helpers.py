"""Shared test helpers: events, a fake clock, a recording IMDS on loopback and the exporter's IMDS client."""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler
from pathlib import Path

from se_exporter.imds.client import ClientSettings, IMDSClient, RateLimiter
from se_exporter.imds.document import Document, ScheduledEvent
from se_exporter.lifecycle import EventStore
from se_exporter.lifecycle.transitions import EventState
from tests.support.quiet_server import QuietHTTPServer
from tests.support.wait import wait_for

TESTDATA = Path(__file__).resolve().parent.parent / "testdata" / "approval"
T0 = 1_750_000_000.0  # the fake clock's start (2025-06-15T15:06:40Z)
VM = "vm-a"


def event(event_id: str = "E1", **overrides: object) -> ScheduledEvent:
    fields: dict[str, object] = {
        "event_id": event_id,
        "event_type": "Reboot",
        "event_status": "Scheduled",
        "resources": (VM, "vm-b"),
        "not_before": datetime.fromtimestamp(T0 + 900, UTC),
        "description": "Virtual machine is going to be restarted as requested by authorized user.",
        "event_source": "User",
        "duration_seconds": -1,
    }
    fields.update(overrides)
    return ScheduledEvent(**fields)  # type: ignore[arg-type]


class Listing:
    """What the approver is handed each poll: the events as a real event store keeps them (classified,
    remembering how each was first seen), as the poll loop does."""

    def __init__(self) -> None:
        self._store = EventStore()
        self._incarnation = 0

    def __call__(self, events: Sequence[ScheduledEvent], now: float = T0) -> list[EventState]:
        document = Document(self._incarnation + 1, tuple(events))
        if not self._store.is_unchanged(document):
            self._incarnation += 1
            self._store.reconcile(document, now)
        return list(self._store.events.values())


def listed(*events: ScheduledEvent) -> list[EventState]:
    """The events as a fresh store lists them (each first seen in its current status)."""
    return Listing()(events)


class FakeClock:
    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


# docs/design.md's example policy; {dry_run} and {leader} to fill in.
DESIGN_POLICY = """\
dry_run: {dry_run}
leader: {leader}
rules:
  - name: user-initiated
    event_sources: [User]
  - name: short-freeze
    event_types: [Freeze]
    max_duration_seconds: 8
"""

# The approval tests' waits: short, tight, and an exception in the condition fails at once.
wait_until = functools.partial(wait_for, timeout=5.0, interval=0.01, retry_on=())


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: object


@dataclass
class RecordingIMDS:
    """A loopback HTTP server that records every request and answers from ``statuses`` (then 200)."""

    statuses: list[int] = field(default_factory=list)
    requests: list[Request] = field(default_factory=list)
    gate: threading.Event = field(default_factory=threading.Event)  # cleared: requests wait
    url: str = ""

    def start_ids(self) -> list[list[str]]:
        """The EventIds of every POST, one list per request."""
        return [[item["EventId"] for item in r.body["StartRequests"]] for r in self.requests]  # type: ignore[index]


def serve_imds() -> Iterator[RecordingIMDS]:
    imds = RecordingIMDS()
    imds.gate.set()
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = json.loads(self.rfile.read(length) or b"null")
            imds.gate.wait(10)
            with lock:
                imds.requests.append(Request("POST", self.path, dict(self.headers), body))
                status = imds.statuses.pop(0) if imds.statuses else 200
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = QuietHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    imds.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield imds
    finally:
        imds.gate.set()
        server.shutdown()
        server.server_close()


def imds_client(base_url: str) -> IMDSClient:
    """The exporter's own IMDS client (its transport, its errors), pointed at a loopback IMDS; no pacing."""
    return IMDSClient(
        ClientSettings(base_url=base_url, timeout=5.0, first_call_timeout=5.0), RateLimiter(min_interval=0)
    )
