"""A scriptable IMDS on loopback for fault tests: answers come from a function the test sets."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.support.quiet_server import QuietHTTPServer


@dataclass
class Answer:
    status: int = 200
    body: bytes = b'{"DocumentIncarnation": 1, "Events": []}'
    delay: float = 0.0
    reset: bool = False  # close the connection without answering
    headers: dict[str, str] = field(default_factory=dict)  # extra response headers
    drip: float = 0.0  # seconds between body bytes: a peer that answers, but one byte at a time


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    at: float = field(default_factory=time.monotonic)


def scheduled_event(event_id: str, **fields: Any) -> dict[str, Any]:
    """One event as IMDS lists it: a user's Reboot of vm-a, Scheduled far ahead, unless ``fields`` say more."""
    return {
        "EventId": event_id,
        "EventType": "Reboot",
        "ResourceType": "VirtualMachine",
        "Resources": ["vm-a"],
        "EventStatus": "Scheduled",
        "NotBefore": "Mon, 11 Apr 2099 22:26:58 GMT",
        "Description": "",
        "EventSource": "User",
        "DurationInSeconds": -1,
    } | fields


def document(incarnation: int, *events: dict[str, Any]) -> Answer:
    return Answer(body=json.dumps({"DocumentIncarnation": incarnation, "Events": list(events)}).encode())


COMPUTE = {
    "name": "vm-a",
    "vmId": "11111111-0000-0000-0000-000000000001",
    "location": "westeurope",
    "subscriptionId": "sub-1",
    "resourceId": "/subscriptions/sub-1/vm-a",
    "vmSize": "Standard_D2s_v5",
}


class FakeIMDS:
    """``respond(seen) -> Answer`` decides each answer; compute metadata answers ``COMPUTE``."""

    def __init__(self) -> None:
        self.requests: list[Seen] = []
        self.respond: Callable[[Seen], Answer] = lambda seen: Answer()
        self.compute = Answer(body=json.dumps(COMPUTE).encode())
        self._lock = threading.Lock()
        self._server = QuietHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> FakeIMDS:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def event_requests(self) -> list[Seen]:
        with self._lock:
            return [s for s in self.requests if s.path.startswith("/metadata/scheduledevents")]

    def _answer(self, seen: Seen) -> Answer:
        with self._lock:
            self.requests.append(seen)
        if seen.path.startswith("/metadata/instance/compute"):
            return self.compute
        return self.respond(seen)

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                self._serve()

            def do_POST(self) -> None:
                self._serve()

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                seen = Seen(self.command, self.path, dict(self.headers), self.rfile.read(length))
                answer = fake._answer(seen)
                if answer.delay:
                    time.sleep(answer.delay)  # the fault under test: a slow IMDS
                if answer.reset:
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                self.send_response(answer.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer.body)))
                for name, header_value in answer.headers.items():
                    self.send_header(name, header_value)
                self.end_headers()
                if not answer.drip:
                    self.wfile.write(answer.body)
                    return
                try:
                    for index in range(len(answer.body)):
                        self.wfile.write(answer.body[index : index + 1])
                        self.wfile.flush()
                        time.sleep(answer.drip)
                except OSError:  # the client gave up on us: that is the point
                    self.close_connection = True

        return Handler
