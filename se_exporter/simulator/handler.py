"""HTTP request handling: the IMDS endpoints (with fault injection) and the ``/_sim/*`` debug API."""

from __future__ import annotations

import json
import logging
import os
import socket
import struct
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from se_exporter.simulator import debug_api
from se_exporter.simulator.faults import FaultPlan, FaultRule
from se_exporter.simulator.imds import (
    ImdsError,
    check_request,
    error_body,
    invalid_version_body,
    malformed_body,
    parse_start_requests,
    render_scheduled_events,
)
from se_exporter.simulator.world import SimWorld

_log = logging.getLogger(__name__)
_ENDPOINTS = {"/metadata/scheduledevents": "scheduledevents", "/metadata/instance/compute": "compute"}
_MAX_BODY = 1 << 20
_JSON = "application/json; charset=utf-8"


class SimHTTPServer(ThreadingHTTPServer):
    """The stdlib threading server, carrying what handlers need."""

    daemon_threads = True  # a delayed answer must not hold up shutdown
    # On Windows SO_REUSEADDR lets a second server take a port already in use (both then answer): there a
    # busy port must be refused, as on Linux, where the option only skips TIME_WAIT.
    allow_reuse_address = os.name != "nt"

    def __init__(self, address: tuple[str, int], world: SimWorld, faults: FaultPlan) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self.world = world
        self.faults = faults
        self.stopping = threading.Event()  # interrupts injected delays at shutdown
        super().__init__(address, ImdsHandler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that gave up mid-answer (its timeout, a test's injected delay) is routine, not a bug.
        if isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError, TimeoutError)):
            _log.debug("client %s went away mid-answer", client_address)
            return
        super().handle_error(request, client_address)


class ImdsHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as clients polling every second expect
    disable_nagle_algorithm = True  # headers and body go out as separate writes: no 40 ms stalls
    server_version = "se-exporter-simulator"

    @property
    def sim(self) -> SimHTTPServer:
        if not isinstance(self.server, SimHTTPServer):  # this handler is only ever given to SimHTTPServer
            raise TypeError(f"the simulator's handler runs on a SimHTTPServer, not {type(self.server).__name__}")
        return self.server

    def version_string(self) -> str:
        return self.server_version

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def log_message(self, format: str, *args: Any) -> None:
        _log.debug("%s - " + format, self.address_string(), *args)

    def _dispatch(self, method: str) -> None:
        url = urlsplit(self.path)
        body = self._read_body()
        if body is None:
            return
        if url.path.startswith("/_sim/"):
            status, payload = debug_api.handle(self.sim.world, self.sim.faults, method, url.path, body)
            self._send_json(status, payload)
            return
        endpoint = _ENDPOINTS.get(url.path)
        if endpoint is None:
            self._answer(method, 404, error_body(404), None)
            return
        try:
            api_version = check_request(self.headers, parse_qs(url.query, keep_blank_values=True))
            if endpoint == "scheduledevents" and self.sim.faults.refuses(api_version):
                raise ImdsError(400, invalid_version_body())
        except ImdsError as exc:
            self._answer(method, exc.status, exc.body, None)
            return
        self._serve_imds(method, endpoint, api_version, body)

    def _serve_imds(self, method: str, endpoint: str, api_version: str, body: bytes) -> None:
        labels = []
        if endpoint == "scheduledevents" and (answer_at := self.sim.world.begin_request()) is not None:
            labels.append("enabling")
            self._wait_until(answer_at)
        first_delay = self.sim.faults.first_response_delay(endpoint)
        if first_delay > 0:
            labels.append(f"first_response_delay:{first_delay:g}s")
            self.sim.stopping.wait(first_delay)
        rule = self.sim.faults.decide(method, endpoint, self.sim.world.clock.real_monotonic())
        if rule is not None:
            labels.append(rule.describe())
        fault = ",".join(labels) or None
        if rule is not None and rule.kind not in ("delay", "drip"):
            self._inject(method, endpoint, api_version, rule, fault)
            return
        if rule is not None and rule.kind == "delay":
            self.sim.stopping.wait(rule.delay_s)
        status, payload = self._imds_answer(method, endpoint, api_version, body)
        self.sim.world.record_request(method, self.path, status, fault)
        data = b"" if payload is None else json.dumps(payload).encode()
        self._send(status, data, _JSON, drip=rule.delay_s if rule is not None and rule.kind == "drip" else 0.0)

    def _wait_until(self, sim_time: float) -> None:
        """Hold the answer until the simulated clock reaches ``sim_time`` (a manual clock: until a test moves it)."""
        clock = self.sim.world.clock
        while (left := sim_time - clock.now()) > 0:
            if self.sim.stopping.wait(min(left / clock.speed, 0.05)):
                return

    def _document(self, endpoint: str, api_version: str) -> dict[str, Any]:
        """What a GET of ``endpoint`` answers now (also the base of a malformed answer)."""
        world = self.sim.world
        if endpoint == "scheduledevents":
            return render_scheduled_events(world.serve_snapshot(), api_version, world.clock)
        return world.vm.compute_document()

    def _imds_answer(self, method: str, endpoint: str, api_version: str, body: bytes) -> tuple[int, Any]:
        world = self.sim.world
        if method == "GET":
            return 200, self._document(endpoint, api_version)
        if method == "POST" and endpoint == "scheduledevents":
            text = body.decode("utf-8", errors="replace")
            try:
                event_ids = parse_start_requests(body)
            except ImdsError as exc:
                world.record_invalid_approval(text)
                return exc.status, exc.body
            world.approve(event_ids, body=text)
            return 200, None
        return 405, error_body(405)

    def _inject(self, method: str, endpoint: str, api_version: str, rule: FaultRule, fault: str | None) -> None:
        if rule.kind == "status":
            self._answer(method, rule.status, error_body(rule.status), fault)
        elif rule.kind == "reset":
            self.sim.world.record_request(method, self.path, 0, fault)
            self._reset()
        else:
            data, content_type = malformed_body(self._document(endpoint, api_version), rule.malformed)
            self.sim.world.record_request(method, self.path, 200, fault)
            gzipped = {"Content-Encoding": "gzip"} if rule.malformed == "gzip_bomb" else {}
            self._send(200, data, content_type, headers=gzipped)

    def _answer(self, method: str, status: int, payload: Any, fault: str | None) -> None:
        """Record an IMDS answer in the ground truth, then send it.

        Recording first means a client that got the answer can rely on finding the record.
        """
        self.sim.world.record_request(method, self.path, status, fault)
        self._send_json(status, payload)

    def _send_json(self, status: int, payload: Any) -> None:
        data = b"" if payload is None else json.dumps(payload).encode()
        self._send(status, data, _JSON)

    def _send(
        self, status: int, data: bytes, content_type: str, *, headers: dict[str, str] | None = None, drip: float = 0.0
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if not drip:
            self.wfile.write(data)
            return
        self.close_connection = True
        try:
            for index in range(len(data)):  # until the client gives up or the server stops
                if self.sim.stopping.wait(drip):
                    return
                self.wfile.write(data[index : index + 1])
                self.wfile.flush()
        except OSError:  # the client gave up on the drip: that is what it is for
            return

    def _read_body(self) -> bytes | None:
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if not 0 <= length <= _MAX_BODY:
            self.close_connection = True  # cannot find the next request in this stream
            self._send_json(400, {"error": "Bad request. Invalid Content-Length"})
            return None
        return self.rfile.read(length) if length else b""

    def _reset(self) -> None:
        """Drop the connection with a TCP RST, without a byte of answer."""
        self.close_connection = True
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.connection.close()
