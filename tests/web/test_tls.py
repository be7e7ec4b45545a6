"""TLS on a real WebServer (127.0.0.1:0), checked with real HTTPS clients (httpx and ssl sockets)."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import ssl
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from cryptography import x509

from se_exporter.web.config import LiveWebConfig, WebConfig
from se_exporter.web.server import DEFER_SECONDS, WebServer
from se_exporter.web.tls import private_pem_file
from tests.web.conftest import client_context
from tests.web.pki import PKI

TLS_CONFIG = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
MTLS_CONFIG = TLS_CONFIG + "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n"

Serve = Callable[..., WebServer]
WriteConfig = Callable[[str], WebConfig]


def https_get(server: WebServer, context: ssl.SSLContext, path: str = "/metrics") -> httpx.Response:
    with httpx.Client(verify=context, trust_env=False, timeout=5) as client:
        return client.get(f"https://127.0.0.1:{server.port}{path}")


def tls_connect(server: WebServer, context: ssl.SSLContext) -> ssl.SSLSocket:
    raw = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    return context.wrap_socket(raw, server_hostname="127.0.0.1")


def test_https_serves_every_endpoint(serve: Serve, write_config: WriteConfig, pki: PKI) -> None:
    server = serve(write_config(TLS_CONFIG))
    assert server.scheme == "https"
    context = client_context(pki)
    response = https_get(server, context)
    assert response.status_code == 200
    assert "se_web_test_up 1.0" in response.text
    assert https_get(server, context, "/-/healthy").status_code == 200
    assert https_get(server, context, "/-/ready").text == "Ready\n"


def test_certificate_is_verified_by_the_client(serve: Serve, write_config: WriteConfig) -> None:
    server = serve(write_config(TLS_CONFIG))
    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        https_get(server, ssl.create_default_context())  # system roots do not know the test CA


def test_plain_http_to_the_tls_port_gets_no_metrics(serve: Serve, write_config: WriteConfig) -> None:
    server = serve(write_config(TLS_CONFIG))
    response = httpx.get(f"http://127.0.0.1:{server.port}/metrics", trust_env=False, timeout=5)
    assert response.status_code == 400
    assert response.text == "Client sent an HTTP request to an HTTPS server.\n"
    assert "se_web_test_up" not in response.text


def test_without_web_config_it_is_plain_http(serve: Serve) -> None:
    server = serve(None)
    assert server.scheme == "http"
    response = httpx.get(f"http://127.0.0.1:{server.port}/metrics", trust_env=False, timeout=5)
    assert response.status_code == 200 and "se_web_test_up 1.0" in response.text


def test_mutual_tls(serve: Serve, write_config: WriteConfig, pki: PKI) -> None:
    server = serve(write_config(MTLS_CONFIG))
    with pytest.raises(httpx.TransportError):
        https_get(server, client_context(pki))  # no client certificate
    with pytest.raises(httpx.TransportError):
        https_get(server, client_context(pki, "rogue"))  # a certificate from another CA
    response = https_get(server, client_context(pki, "client"))
    assert response.status_code == 200 and "se_web_test_up 1.0" in response.text


def test_mutual_tls_with_tls12(serve: Serve, write_config: WriteConfig, pki: PKI) -> None:
    server = serve(write_config(MTLS_CONFIG))
    tls12 = ssl.TLSVersion.TLSv1_2
    with pytest.raises(httpx.TransportError):
        https_get(server, client_context(pki, maximum_version=tls12))
    assert https_get(server, client_context(pki, "client", maximum_version=tls12)).status_code == 200


def test_client_allowed_sans(serve: Serve, write_config: WriteConfig, pki: PKI) -> None:
    server = serve(write_config(MTLS_CONFIG + "  client_allowed_sans: [scraper.example]\n"))
    assert https_get(server, client_context(pki, "client")).status_code == 200
    refused = https_get(server, client_context(pki, "other"))  # same CA, SAN intruder.example
    assert (refused.status_code, refused.text) == (
        403,
        "the client certificate has none of the names in client_allowed_sans\n",
    ), "told why, as exporter-toolkit's bad certificate does, where Python can check only after the handshake"
    assert "se_web_test_up" not in refused.text


def test_client_allowed_sans_compare_ip_addresses_canonically(write_config: WriteConfig) -> None:
    tls = write_config(MTLS_CONFIG + '  client_allowed_sans: ["::0001", scraper.example]\n').tls
    assert tls is not None
    assert tls.allows_peer({"subjectAltName": (("IP Address", "0:0:0:0:0:0:0:1\n"),)})  # as ssl reports it
    assert tls.allows_peer({"subjectAltName": (("DNS", "scraper.example"),)})
    assert not tls.allows_peer({"subjectAltName": (("IP Address", "::2"), ("DNS", "intruder.example"))})
    assert not tls.allows_peer(None)


def test_verify_client_cert_if_given(serve: Serve, write_config: WriteConfig, pki: PKI) -> None:
    config = TLS_CONFIG + "  client_auth_type: VerifyClientCertIfGiven\n  client_ca_file: ca.crt\n"
    server = serve(write_config(config))
    assert https_get(server, client_context(pki)).status_code == 200
    assert https_get(server, client_context(pki, "client")).status_code == 200
    with pytest.raises(httpx.TransportError):
        https_get(server, client_context(pki, "rogue"))  # given, so verified, and it fails


def test_min_version_tls13_refuses_a_tls12_only_client(serve: Serve, write_config: WriteConfig, pki: PKI) -> None:
    server = serve(write_config(TLS_CONFIG + "  min_version: TLS13\n"))
    with pytest.raises(httpx.ConnectError):
        https_get(server, client_context(pki, maximum_version=ssl.TLSVersion.TLSv1_2))
    with tls_connect(server, client_context(pki)) as conn:
        assert conn.version() == "TLSv1.3"


def test_default_minimum_is_tls12(serve: Serve, write_config: WriteConfig, pki: PKI) -> None:
    server = serve(write_config(TLS_CONFIG))
    with tls_connect(server, client_context(pki, maximum_version=ssl.TLSVersion.TLSv1_2)) as conn:
        assert conn.version() == "TLSv1.2"


def test_max_version_and_cipher_suites(serve: Serve, write_config: WriteConfig, pki: PKI) -> None:
    config = TLS_CONFIG + "  max_version: TLS12\n  cipher_suites: [TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256]\n"
    server = serve(write_config(config))
    with tls_connect(server, client_context(pki)) as conn:
        assert conn.version() == "TLSv1.2"
        assert (conn.cipher() or ("none",))[0] == "ECDHE-ECDSA-CHACHA20-POLY1305"
    only_gcm = client_context(pki)
    only_gcm.set_ciphers("ECDHE-ECDSA-AES128-GCM-SHA256")
    with pytest.raises(ssl.SSLError):
        tls_connect(server, only_gcm)


@pytest.mark.full
def test_a_silent_client_neither_blocks_others_nor_keeps_its_thread(
    serve: Serve, write_config: WriteConfig, pki: PKI
) -> None:
    server = serve(write_config(TLS_CONFIG), handshake_timeout=0.5)
    silent = [socket.create_connection(("127.0.0.1", server.port), timeout=30) for _ in range(3)]
    try:
        started = time.monotonic()
        # Accepted while the silent ones still hold their connections: it never waits behind them.
        assert https_get(server, client_context(pki)).status_code == 200
        for conn in silent:
            assert conn.recv(1) == b""  # the server hung up after the handshake timeout
        # On Linux the kernel holds a silent connection for DEFER_SECONDS before the server sees it (web/server.py);
        # then the handshake's 0.5 s. A bound of twice that: the point is that it ends, not how fast.
        assert time.monotonic() - started < 2 * (DEFER_SECONDS + 4)
    finally:
        for conn in silent:
            conn.close()


def test_garbage_instead_of_a_handshake_is_dropped(serve: Serve, write_config: WriteConfig, pki: PKI) -> None:
    server = serve(write_config(TLS_CONFIG))
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as conn:
        conn.sendall(b"\x16\x03\x01\x00\x05hello" + bytes(200))
        with contextlib.suppress(ConnectionResetError):
            while conn.recv(1024):  # perhaps an alert, then the server hangs up
                pass
    assert https_get(server, client_context(pki)).status_code == 200


def test_renewed_certificate_is_picked_up_and_a_broken_one_is_not(
    serve: Serve, write_config: WriteConfig, pki: PKI, config_dir: Path
) -> None:
    server = serve(LiveWebConfig(None, write_config(TLS_CONFIG), check_every=0.0))  # files looked at each time
    context = client_context(pki)

    def serial() -> int:
        with tls_connect(server, context) as conn:
            der = conn.getpeercert(binary_form=True)
            assert der is not None
            return x509.load_der_x509_certificate(der).serial_number

    first = serial()
    renewed = pki.new_server_cert(config_dir)  # cert-manager style: new files in place
    assert serial() == renewed.serial_number != first
    # A half-written renewal (key of another pair): keep serving the last good certificate.
    shutil.copy(pki.path("client.key"), config_dir / "server.key")
    assert serial() == renewed.serial_number
    assert https_get(server, context).status_code == 200


@pytest.mark.parametrize(
    ("prefer", "chosen"), [(True, "ECDHE-ECDSA-AES128-GCM-SHA256"), (False, "ECDHE-ECDSA-CHACHA20-POLY1305")]
)
def test_prefer_server_cipher_suites_decides_whose_order_wins(
    serve: Serve, write_config: WriteConfig, pki: PKI, prefer: bool, chosen: str
) -> None:
    """exporter-toolkit's "client chooses cipher" case: with false, the client's first choice wins."""
    suites = "[TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256]"
    config = TLS_CONFIG + f"  max_version: TLS12\n  cipher_suites: {suites}\n"
    server = serve(write_config(config + f"  prefer_server_cipher_suites: {str(prefer).lower()}\n"))
    client = client_context(pki)
    client.set_ciphers("ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-ECDSA-AES128-GCM-SHA256")  # the client's order
    with tls_connect(server, client) as conn:
        assert (conn.cipher() or ("none",))[0] == chosen


def test_without_client_ca_file_client_certificates_are_verified_against_the_system_trust_store(
    serve: Serve, write_config: WriteConfig, pki: PKI, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """As exporter-toolkit does, with a warning that names the fix. OpenSSL's system store honours SSL_CERT_FILE:
    pointed at the test CA, the test client is trusted; pointed at another CA, it is refused."""
    monkeypatch.setenv("SSL_CERT_FILE", str(pki.ca_file))
    monkeypatch.setenv("SSL_CERT_DIR", str(pki.dir / "no-such-dir"))
    text = (Path(__file__).parents[1] / "testdata" / "web" / "good" / "client_auth_system_trust.yml").read_text()
    with caplog.at_level("WARNING", logger="se_exporter.web.tls"):
        trusted = serve(write_config(text))
    assert "any publicly trusted certificate passes; set client_ca_file" in caplog.text
    assert https_get(trusted, client_context(pki, "client")).status_code == 200
    with pytest.raises(httpx.TransportError):
        https_get(trusted, client_context(pki))  # no certificate: required
    monkeypatch.setenv("SSL_CERT_FILE", str(pki.path("rogue.crt")))  # a system store without the test CA
    untrusted = serve(write_config(text))
    with pytest.raises(httpx.TransportError):
        https_get(untrusted, client_context(pki, "client"))


def test_inline_cert_key_and_client_ca_serve_mutual_tls(
    serve: Serve, write_config: WriteConfig, pki: PKI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """exporter-toolkit's tls_config_noAuth_tlsInline case, with mutual TLS: the PEM in the YAML itself."""

    def inline(name: str) -> str:
        return "|\n" + "".join(f"    {line}\n" for line in pki.path(name).read_text().splitlines())

    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))  # where a temporary PEM file would go
    config = (
        f"tls_server_config:\n  cert: {inline('server.crt')}  key: {inline('server.key')}"
        f"  client_ca: {inline('ca.crt')}  client_auth_type: RequireAndVerifyClientCert\n"
    )
    loaded = write_config(config)
    assert loaded.tls is not None and "PRIVATE KEY" not in repr(loaded)
    server = serve(loaded)
    assert https_get(server, client_context(pki, "client")).status_code == 200
    with pytest.raises(httpx.TransportError):
        https_get(server, client_context(pki, "rogue"))
    assert list(temporary.iterdir()) == [], "the key was left in a file"


def test_a_private_pem_file_is_readable_by_this_process_alone_and_gone_after(tmp_path: Path) -> None:
    with private_pem_file("-----BEGIN CERTIFICATE-----\n") as path:
        assert Path(path).read_text() == "-----BEGIN CERTIFICATE-----\n"
        if os.name == "posix" and not path.startswith("/proc/self/fd/"):  # Windows: the user's own Temp
            assert Path(path).stat().st_mode & 0o077 == 0
    assert not Path(path).exists() or path.startswith("/proc/self/fd/")
