"""OTLP/HTTP on http.client: what reaches a collector (headers, compression, TLS, proxies) over loopback,
one kept-alive connection, and every answer sorted as the OTLP specification says (taken, partly taken,
refused and retryable after a while, refused for good), with the reason in words."""

from __future__ import annotations

import base64
import gzip
import http.server
import select
import socket
import ssl
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsPartialSuccess,
    ExportLogsServiceResponse,
)

from se_exporter.errors import ConfigError
from se_exporter.otel.config import SignalConfig, parse_otel_environment
from se_exporter.otel.otlp_http import OTLPHttpClient
from tests.support.quiet_server import QuietHTTPServer
from tests.support.wait import wait_for
from tests.web.pki import PKI, make_pki

BODY = b"\x0a\x03abc" * 100  # the client sends bytes; what they encode is the pipeline's business


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    body: bytes
    connection: int


@dataclass
class Collector:
    """A loopback HTTP/1.1 server that records each POST and answers ``status`` (keep-alive)."""

    status: int = 200
    seen: list[Seen] = field(default_factory=list)
    connections: int = 0
    close_idle: bool = False  # close each connection after one answer, without saying so
    hold: threading.Event | None = None  # when set: never answer until it is set
    retry_after: str | None = None  # a Retry-After header
    answer: bytes = b""  # the answer's body (a partial success, say)
    drip: float = 0.0  # seconds between the bytes of the status line: a collector that answers, slowly

    def handler(self) -> type[http.server.BaseHTTPRequestHandler]:
        collector = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                collector.connections += 1
                self.number = collector.connections

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers["Content-Length"]))
                encoding = self.headers.get("Content-Encoding", "")
                body = (
                    gzip.decompress(raw)
                    if encoding == "gzip"
                    else zlib.decompress(raw)
                    if encoding == "deflate"
                    else raw
                )
                collector.seen.append(Seen(self.path, dict(self.headers), body, self.number))
                if collector.hold is not None:
                    collector.hold.wait(10)
                if collector.drip:
                    for byte in b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n":
                        self.wfile.write(bytes([byte]))
                        self.wfile.flush()
                        time.sleep(collector.drip)
                    return
                self.send_response(collector.status)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(collector.answer)))
                if collector.retry_after is not None:
                    self.send_header("Retry-After", collector.retry_after)
                self.end_headers()
                self.wfile.write(collector.answer)
                if collector.close_idle:
                    self.close_connection = True  # no "Connection: close": the client finds out later

            def log_message(self, *args: object) -> None:
                pass

        return Handler


@pytest.fixture
def serve() -> Iterator[Callable[..., tuple[Collector, int]]]:
    servers: list[http.server.ThreadingHTTPServer] = []

    def start(collector: Collector | None = None, tls: ssl.SSLContext | None = None) -> tuple[Collector, int]:
        collector = collector or Collector()
        server = QuietHTTPServer(("127.0.0.1", 0), collector.handler())
        server.daemon_threads = True
        if tls is not None:
            server.socket = tls.wrap_socket(server.socket, server_side=True)
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        servers.append(server)
        return collector, int(server.server_address[1])

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def signal(endpoint: str, **kwargs: object) -> SignalConfig:
    return SignalConfig(exporter="otlp", endpoint=endpoint, timeout=2.0, **kwargs)  # type: ignore[arg-type]


def test_posts_protobuf_with_the_configured_headers_on_one_kept_alive_connection(
    serve: Callable[..., tuple[Collector, int]],
) -> None:
    collector, port = serve()
    client = OTLPHttpClient(
        signal(f"http://127.0.0.1:{port}/v1/logs?tenant=a", headers={"authorization": "Bearer x"}), "se-exporter/test"
    )
    assert all(client.post(BODY).accepted for _ in range(3))
    assert [(s.path, s.body) for s in collector.seen] == [("/v1/logs?tenant=a", BODY)] * 3
    headers = collector.seen[0].headers
    assert headers["Content-Type"] == "application/x-protobuf" and headers["authorization"] == "Bearer x"
    assert headers["User-Agent"] == "se-exporter/test" and "Content-Encoding" not in headers
    assert collector.connections == 1


@pytest.mark.parametrize("compression", ["gzip", "deflate"])
def test_compression(serve: Callable[..., tuple[Collector, int]], compression: str) -> None:
    collector, port = serve()
    assert (
        OTLPHttpClient(signal(f"http://127.0.0.1:{port}/v1/traces", compression=compression), "t").post(BODY).accepted
    )
    assert collector.seen[0].headers["Content-Encoding"] == compression and collector.seen[0].body == BODY


@pytest.mark.parametrize(
    ("status", "retryable"),
    [
        (400, False),
        (401, False),
        (404, False),
        (413, False),
        (500, False),
        (429, True),
        (502, True),
        (503, True),
        (504, True),
    ],
)
def test_answers_other_than_2xx_are_retryable_only_as_the_specification_says(
    serve: Callable[..., tuple[Collector, int]], status: int, retryable: bool
) -> None:
    _, port = serve(Collector(status=status))
    outcome = OTLPHttpClient(signal(f"http://127.0.0.1:{port}/v1/logs"), "t").post(BODY)
    assert (outcome.accepted, outcome.retryable, outcome.retry_after) == (False, retryable, None)
    assert outcome.problem.startswith(f"the collector answered {status} ")


@pytest.mark.parametrize(("retry_after", "seconds"), [("7", 7.0), ("100000", 300.0), ("soon", None)])
def test_retry_after_is_honoured_within_a_bound(
    serve: Callable[..., tuple[Collector, int]], retry_after: str, seconds: float | None
) -> None:
    _, port = serve(Collector(status=503, retry_after=retry_after))
    outcome = OTLPHttpClient(signal(f"http://127.0.0.1:{port}/v1/logs"), "t").post(BODY)
    assert outcome.retryable and outcome.retry_after == seconds


def test_a_partial_success_is_taken_with_what_was_rejected(serve: Callable[..., tuple[Collector, int]]) -> None:
    rejected = ExportLogsServiceResponse(
        partial_success=ExportLogsPartialSuccess(rejected_log_records=3, error_message="attribute too long")
    )
    _, port = serve(Collector(answer=rejected.SerializeToString()))
    client = OTLPHttpClient(
        signal(f"http://127.0.0.1:{port}/v1/logs"),
        "t",
        partial_success=lambda body: (
            ExportLogsServiceResponse.FromString(body).partial_success.rejected_log_records,
            ExportLogsServiceResponse.FromString(body).partial_success.error_message,
        ),
    )
    outcome = client.post(BODY)
    assert (outcome.accepted, outcome.rejected) == (True, 3)
    assert outcome.problem == "the collector rejected 3 of them: attribute too long"


def test_nobody_listening_and_no_such_host_are_retryable_and_say_so() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again: connection refused
    refused = OTLPHttpClient(signal(f"http://127.0.0.1:{port}/v1/logs"), "t").post(BODY)
    assert (refused.accepted, refused.retryable) == (False, True)
    assert refused.problem == f"127.0.0.1:{port} refused the connection"
    unknown = OTLPHttpClient(signal("http://collector.invalid:4318/v1/logs"), "t").post(BODY)
    assert unknown.retryable and unknown.problem.startswith("cannot resolve collector.invalid: ")


def test_a_collector_dripping_its_answer_is_a_timeout_within_the_timeout(
    serve: Callable[..., tuple[Collector, int]],
) -> None:
    _, port = serve(Collector(drip=0.2))
    client = OTLPHttpClient(
        SignalConfig(exporter="otlp", endpoint=f"http://127.0.0.1:{port}/v1/logs", timeout=1.0), "t"
    )
    began = time.monotonic()
    outcome = client.post(BODY)
    assert time.monotonic() - began < 2.0
    assert outcome.retryable and outcome.problem.startswith(f"no answer from 127.0.0.1:{port} within 1 s")


def test_a_user_agent_header_of_the_users_replaces_ours(serve: Callable[..., tuple[Collector, int]]) -> None:
    collector, port = serve()
    client = OTLPHttpClient(signal(f"http://127.0.0.1:{port}/v1/logs", headers={"user-agent": "mine/1"}), "ours")
    assert client.post(BODY).accepted
    assert [value for name, value in collector.seen[0].headers.items() if name.lower() == "user-agent"] == ["mine/1"]


def test_a_connection_the_collector_closed_while_idle_is_replaced_without_a_failure(
    serve: Callable[..., tuple[Collector, int]],
) -> None:
    collector, port = serve(Collector(close_idle=True))
    client = OTLPHttpClient(signal(f"http://127.0.0.1:{port}/v1/logs"), "t")
    assert client.post(BODY).accepted
    time.sleep(0.1)  # the server has closed its end by now; the client learns it only when it writes
    assert client.post(BODY).accepted and client.post(BODY).accepted
    assert len(collector.seen) == 3 and collector.connections == 3


def test_a_collector_too_slow_on_a_kept_connection_gets_the_request_once(
    serve: Callable[..., tuple[Collector, int]],
) -> None:
    """Only a connection found closed is tried again: a timeout is a failure, not a reason to send twice."""
    collector, port = serve()
    client = OTLPHttpClient(
        SignalConfig(exporter="otlp", endpoint=f"http://127.0.0.1:{port}/v1/logs", timeout=0.5), "t"
    )
    assert client.post(BODY).accepted
    collector.hold = hold = threading.Event()
    try:
        assert client.post(BODY).accepted is False
    finally:
        hold.set()
    assert len(collector.seen) == 2


def test_close_makes_a_send_in_progress_give_up(serve: Callable[..., tuple[Collector, int]]) -> None:
    hold = threading.Event()
    collector, port = serve(Collector(hold=hold))
    client = OTLPHttpClient(signal(f"http://127.0.0.1:{port}/v1/logs"), "t")
    results: list[bool] = []
    sender = threading.Thread(target=lambda: results.append(client.post(BODY).accepted))
    sender.start()
    wait_for(lambda: collector.seen, 5, "the request arrived")
    began = time.monotonic()
    client.close()
    sender.join(5)
    hold.set()
    assert results == [False] and time.monotonic() - began < 1.5
    assert client.post(BODY).accepted is False and len(collector.seen) == 1, "closed: nothing sent after close()"


def test_close_during_a_send_on_a_kept_connection_does_not_send_again(
    serve: Callable[..., tuple[Collector, int]],
) -> None:
    collector, port = serve()
    client = OTLPHttpClient(signal(f"http://127.0.0.1:{port}/v1/logs"), "t")
    assert client.post(BODY).accepted
    collector.hold = hold = threading.Event()
    results: list[bool] = []
    sender = threading.Thread(target=lambda: results.append(client.post(BODY).accepted))
    sender.start()
    wait_for(lambda: len(collector.seen) == 2, 5, "the second request arrived")
    client.close()
    sender.join(5)
    hold.set()
    assert results == [False] and len(collector.seen) == 2


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> PKI:
    return make_pki(tmp_path_factory.mktemp("pki"))


def server_tls(pki: PKI, client_ca: Path | None = None) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pki.path("server.crt"), pki.path("server.key"))
    if client_ca is not None:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(client_ca)
    return context


def test_tls_with_the_configured_ca_and_client_certificate(
    serve: Callable[..., tuple[Collector, int]], pki: PKI
) -> None:
    collector, port = serve(tls=server_tls(pki, client_ca=pki.ca_file))
    endpoint = f"https://127.0.0.1:{port}/v1/logs"
    assert (
        OTLPHttpClient(
            signal(
                endpoint,
                certificate=str(pki.ca_file),
                client_certificate=str(pki.path("client.crt")),
                client_key=str(pki.path("client.key")),
            ),
            "t",
        )
        .post(BODY)
        .accepted
    )
    assert collector.seen[0].body == BODY
    # Without our CA the collector's certificate is not trusted; without a client certificate it refuses us.
    untrusted = OTLPHttpClient(signal(endpoint), "t").post(BODY)
    assert untrusted.accepted is False and "CERTIFICATE_VERIFY_FAILED" in untrusted.problem
    assert OTLPHttpClient(signal(endpoint, certificate=str(pki.ca_file)), "t").post(BODY).accepted is False
    assert len(collector.seen) == 1


def test_an_unreadable_certificate_is_a_configuration_error(pki: PKI) -> None:
    with pytest.raises(ConfigError, match="CERTIFICATE"):
        OTLPHttpClient(signal("https://127.0.0.1:1/v1/logs", certificate=str(pki.path("garbage.pem"))), "t")
    with pytest.raises(ConfigError, match="http:// or https://"):
        OTLPHttpClient(signal("ftp://collector/v1/logs"), "t")


class Proxy:
    """A forwarding proxy on loopback: CONNECT tunnels (for https) and absolute-URL requests (for http)."""

    def __init__(self) -> None:
        self.requests: list[str] = []
        proxy = self

        self.authorizations: list[str] = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_CONNECT(self) -> None:
                proxy.requests.append(f"CONNECT {self.path}")
                proxy.authorizations.append(self.headers.get("Proxy-Authorization", ""))
                host, port = self.path.rsplit(":", 1)
                with socket.create_connection((host, int(port))) as upstream:
                    self.send_response(200)
                    self.end_headers()
                    relay(self.connection, upstream)
                self.close_connection = True

            def do_POST(self) -> None:
                proxy.requests.append(f"POST {self.path}")
                proxy.authorizations.append(self.headers.get("Proxy-Authorization", ""))
                url = self.path.removeprefix("http://")
                authority, _, path = url.partition("/")
                host, port = authority.rsplit(":", 1)
                body = self.rfile.read(int(self.headers["Content-Length"]))
                with socket.create_connection((host, int(port))) as upstream:
                    upstream.sendall(
                        f"POST /{path} HTTP/1.1\r\nHost: {authority}\r\nContent-Length: {len(body)}\r\n"
                        f"Connection: close\r\n\r\n".encode()
                        + body
                    )
                    answer = b"".join(iter(lambda: upstream.recv(65536), b""))
                self.wfile.write(answer)
                self.close_connection = True

            def log_message(self, *args: object) -> None:
                pass

        self.server = QuietHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()


def relay(a: socket.socket, b: socket.socket) -> None:
    while True:
        ready, _, _ = select.select([a, b], [], [], 5)
        if not ready:
            return
        for sock in ready:
            data = sock.recv(65536)
            if not data:
                return
            (b if sock is a else a).sendall(data)


@pytest.fixture
def proxy() -> Iterator[Proxy]:
    proxy = Proxy()
    yield proxy
    proxy.server.shutdown()
    proxy.server.server_close()


def test_through_https_proxy_and_http_proxy_as_the_environment_says(
    serve: Callable[..., tuple[Collector, int]], pki: PKI, proxy: Proxy
) -> None:
    collector, tls_port = serve(tls=server_tls(pki))
    _, plain_port = serve(collector)
    environ = {
        "HTTPS_PROXY": proxy.url,
        "http_proxy": proxy.url,
        "OTEL_EXPORTER_OTLP_CERTIFICATE": str(pki.ca_file),
        "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT": f"https://127.0.0.1:{tls_port}/v1/logs",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"http://127.0.0.1:{plain_port}/v1/traces",
    }
    config = parse_otel_environment(environ)
    assert OTLPHttpClient(config.logs, "t").post(BODY).accepted
    assert OTLPHttpClient(config.traces, "t").post(BODY).accepted
    assert proxy.requests == [f"CONNECT 127.0.0.1:{tls_port}", f"POST http://127.0.0.1:{plain_port}/v1/traces"]
    assert [(s.path, s.body) for s in collector.seen] == [("/v1/logs", BODY), ("/v1/traces", BODY)]


@pytest.mark.parametrize(
    ("environ", "proxy"),
    [
        ({}, None),
        ({"HTTPS_PROXY": "http://proxy:3128"}, None),  # the endpoint is http://
        ({"HTTP_PROXY": "http://proxy:3128"}, "http://proxy:3128"),
        ({"http_proxy": "http://lower:3128", "HTTP_PROXY": "http://upper:3128"}, "http://lower:3128"),
        ({"HTTP_PROXY": "http://proxy:3128", "NO_PROXY": "localhost,collector.example"}, None),
        ({"HTTP_PROXY": "http://proxy:3128", "NO_PROXY": ".example"}, None),
        ({"HTTP_PROXY": "http://proxy:3128", "no_proxy": "*"}, None),
        ({"HTTP_PROXY": "http://proxy:3128", "NO_PROXY": "ollector.example,other.example"}, "http://proxy:3128"),
        ({"HTTP_PROXY": "http://proxy:3128", "NO_PROXY": "collector.example:4318"}, None),
        ({"HTTP_PROXY": "http://proxy:3128", "NO_PROXY": "collector.example:9999"}, "http://proxy:3128"),
    ],
)
def test_which_proxy_the_environment_gives_the_endpoint(environ: dict[str, str], proxy: str | None) -> None:
    config = parse_otel_environment({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector.example:4318", **environ})
    assert config.logs.proxy == config.traces.proxy == proxy


@pytest.mark.parametrize(
    ("endpoint", "no_proxy", "bypassed"),
    [
        ("http://10.1.2.3:4318", "10.0.0.0/8", True),  # Kubernetes lists hold ranges
        ("http://10.1.2.3:4318", "192.168.0.0/16,172.16.0.0/12", False),
        ("http://[fd00::5]:4318", "fd00::/8", True),
        ("http://10.1.2.3:4318", "10.1.2.3", True),
        ("http://10.1.2.3:4318", "10.1.2.3:4318", True),
        ("http://10.1.2.3:4318", "10.1.2.3:4317", False),
        ("http://[::1]:4318", "[::1]:4318", True),
        ("http://collector.example:4318", "example", True),
        ("http://collector.example:4318", "10.0.0.0/8", False),
    ],
)
def test_no_proxy_takes_ranges_and_ports(endpoint: str, no_proxy: str, bypassed: bool) -> None:
    config = parse_otel_environment(
        {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "HTTP_PROXY": "http://proxy:3128", "NO_PROXY": no_proxy}
    )
    assert (config.logs.proxy is None) == bypassed


def test_proxy_credentials_go_to_the_proxy_only(
    serve: Callable[..., tuple[Collector, int]], pki: PKI, proxy: Proxy
) -> None:
    """Credentials in HTTPS_PROXY were dropped: the proxy answered 407 for as long as the exporter ran."""
    collector, tls_port = serve(tls=server_tls(pki))
    _, plain_port = serve(collector)
    credentialed = proxy.url.replace("http://", "http://se%40user:p%3Ass@")
    environ = {
        "HTTPS_PROXY": credentialed,
        "HTTP_PROXY": credentialed,
        "OTEL_EXPORTER_OTLP_CERTIFICATE": str(pki.ca_file),
        "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT": f"https://127.0.0.1:{tls_port}/v1/logs",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"http://127.0.0.1:{plain_port}/v1/traces",
    }
    config = parse_otel_environment(environ)
    assert OTLPHttpClient(config.logs, "t").post(BODY).accepted
    assert OTLPHttpClient(config.traces, "t").post(BODY).accepted
    expected = "Basic " + base64.b64encode(b"se@user:p:ss").decode()
    assert proxy.authorizations == [expected, expected]
    assert all("Proxy-Authorization" not in seen.headers for seen in collector.seen), "the collector never sees them"
