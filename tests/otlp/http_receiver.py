"""The OTLP/HTTP test receiver: ``/v1/traces`` and ``/v1/logs``, protobuf or JSON, gzip or deflate.

HTTP/1.1 with keep-alive, like a real collector; :meth:`OTLPHttpReceiver.stop` cuts the open
connections too, as a dead collector would.
"""

from __future__ import annotations

import base64
import contextlib
import gzip
import json
import logging
import socket
import ssl
import sys
import threading
import time
import zlib
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Final

from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message
from google.rpc import status_pb2

from .receiver import LOOPBACK, REQUEST_TYPES, OTLPReceiver
from .store import TelemetryStore

_log = logging.getLogger(__name__)

_PROTOBUF: Final = "application/x-protobuf"
_JSON: Final = "application/json"
_SIGNALS: Final = {"/v1/traces": "traces", "/v1/logs": "logs"}


def hex_ids_to_base64(obj: Any) -> Any:
    """OTLP/JSON encodes trace/span ids as hex; ``json_format`` expects base64 for bytes fields."""
    if isinstance(obj, dict):
        out = {}
        for key, value in obj.items():
            if key in ("traceId", "spanId", "parentSpanId", "trace_id", "span_id", "parent_span_id") and (
                isinstance(value, str) and len(value) in (16, 32)
            ):
                with contextlib.suppress(ValueError):  # else: already base64
                    value = base64.b64encode(bytes.fromhex(value)).decode()
            out[key] = hex_ids_to_base64(value)
        return out
    if isinstance(obj, list):
        return [hex_ids_to_base64(v) for v in obj]
    return obj


def _decode(message: Message, body: bytes, encoding: str, json_body: bool) -> Message:
    """``message`` filled from the request body (raises on a body a collector would refuse)."""
    if encoding == "gzip":
        body = gzip.decompress(body)
    elif encoding == "deflate":
        body = zlib.decompress(body)
    elif encoding not in ("", "identity", "none"):
        raise ValueError(f"unsupported Content-Encoding {encoding!r}")
    if json_body:
        json_format.ParseDict(hex_ids_to_base64(json.loads(body)), message, ignore_unknown_fields=True)
    else:
        message.ParseFromString(body)
    return message


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True  # restart on the same port despite TIME_WAIT

    def __init__(self, port: int, receiver: OTLPHttpReceiver, tls: ssl.SSLContext | None = None) -> None:
        self.receiver = receiver
        self.stopping = False
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        super().__init__((LOOPBACK, port), _OTLPHandler)
        if tls is not None:  # every connection's TLS handshake happens on its first read, in its own thread
            self.socket = tls.wrap_socket(self.socket, server_side=True, do_handshake_on_connect=False)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._connections_lock:
            self._connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._connections_lock:
            self._connections.discard(request)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        with self._connections_lock:
            connections = list(self._connections)
        for conn in connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request: Any, client_address: Any) -> None:
        gone = isinstance(sys.exc_info()[1], BrokenPipeError | ConnectionResetError)  # the client hung up: its right
        if not self.stopping and not gone:
            _log.exception("OTLP test receiver: error handling request from %s", client_address)


class _OTLPHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, like a real collector
    timeout = 60
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        _log.debug("OTLP/HTTP receiver: " + format, *args)

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(chunks)
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _reply(self, status: int, body: bytes, content_type: str, extra: Mapping[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for key, value in (extra or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)

    def _reply_status(
        self, status: int, grpc_code: int, message: str, json_reply: bool, extra: Mapping[str, str] | None = None
    ) -> None:
        error = status_pb2.Status(code=grpc_code, message=message)
        if json_reply:
            self._reply(status, json_format.MessageToJson(error).encode(), _JSON, extra)
        else:
            self._reply(status, error.SerializeToString(), _PROTOBUF, extra)

    def do_POST(self) -> None:
        receiver = self.server.receiver
        store = receiver.store
        path = self.path.split("?", 1)[0]
        if len(path) > 1:
            path = path.rstrip("/")
        content_type = self.headers.get("Content-Type", "").split(";", 1)[0].strip().lower()
        encoding = self.headers.get("Content-Encoding", "").strip().lower()
        headers = {k.lower(): v for k, v in self.headers.items()}
        json_reply = content_type == _JSON
        body = self._read_body()

        protocol = "http/json" if json_reply else "http/protobuf"
        signal = _SIGNALS.get(path)

        def reject(
            status: int, grpc_code: int, message: str, extra: Mapping[str, str] | None = None, request: Any = None
        ) -> None:
            store.record_rejected(
                signal or path,
                protocol=protocol,
                status=status,
                headers=headers,
                content_type=content_type,
                content_encoding=encoding,
                message=request,
            )
            self._reply_status(status, grpc_code, message, json_reply, extra)

        if signal is None:
            reject(404, 5, f"unknown path {path}")
            return

        failure = receiver.take_failure()
        if failure is not None:
            extra = {} if failure.retry_after is None else {"Retry-After": f"{failure.retry_after:g}"}
            try:  # counted, not kept
                request = _decode(REQUEST_TYPES[signal](), body, encoding, json_reply)
            except (ValueError, OSError, EOFError, zlib.error, DecodeError, json_format.ParseError):
                request = None
            reject(failure.http_status, failure.grpc_code.value[0], failure.message, extra, request)
            return

        if content_type not in (_PROTOBUF, _JSON):
            reject(415, 3, f"unsupported Content-Type {content_type!r}")
            return
        try:
            message = _decode(REQUEST_TYPES[signal](), body, encoding, json_reply)
        except (ValueError, OSError, EOFError, zlib.error, DecodeError, json_format.ParseError) as exc:
            reject(400, 3, f"cannot decode request: {exc}")
            return

        store.ingest(
            signal, message, protocol=protocol, headers=headers, content_type=content_type, content_encoding=encoding
        )
        response = receiver.response(message)
        if json_reply:
            self._reply(200, json_format.MessageToJson(response).encode(), _JSON)
        else:
            self._reply(200, response.SerializeToString(), _PROTOBUF)

    def _method_not_allowed(self) -> None:
        self._reply(405, b"", "text/plain", {"Allow": "POST"})

    do_GET = do_PUT = do_DELETE = do_PATCH = _method_not_allowed


class OTLPHttpReceiver(OTLPReceiver):
    """OTLP/HTTP receiver (``/v1/traces``, ``/v1/logs``; protobuf or JSON; gzip/deflate)."""

    protocol = "http/protobuf"

    def __init__(
        self, store: TelemetryStore | None = None, *, port: int = 0, tls: ssl.SSLContext | None = None
    ) -> None:
        super().__init__(store, port=port)
        self.tls = tls  # an HTTPS receiver (its endpoint then says https)
        self._server: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def endpoint(self) -> str:
        return f"{'https' if self.tls is not None else 'http'}://{LOOPBACK}:{self.port}"

    def url(self, signal: str) -> str:
        """Full signal URL, e.g. ``url("logs")`` -> ``http://127.0.0.1:PORT/v1/logs`` (what the SDK
        exporters' ``endpoint=`` argument expects)."""
        return f"{self.endpoint}/v1/{signal}"

    def _bind_and_serve(self, port: int) -> int:
        deadline = time.monotonic() + 5.0
        while True:
            try:
                server = _HTTPServer(port, self, self.tls)
                break
            except OSError:
                if not port or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, name=f"otlp-http-{port}", daemon=True
        )
        self._thread.start()
        return int(server.server_address[1])

    def _shutdown(self) -> None:
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is None:
            return
        server.stopping = True
        server.shutdown()  # stops accepting
        server.server_close()  # closes the listening socket
        server.close_connections()  # cuts keep-alive connections, as a dead collector would
        if thread is not None:
            thread.join(timeout=5)


# -- gRPC ------------------------------------------------------------------------------------------
