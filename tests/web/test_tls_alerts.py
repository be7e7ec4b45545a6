"""A client the TLS handshake refuses is told why, by the TLS alert OpenSSL writes (exporter-toolkit's cases
"TLS 1.1 client", "no common cipher", a certificate of an unknown CA): asyncio dropped it and closed, so
Prometheus logged EOF instead of Go's "protocol version not supported" or "handshake failure"."""

from __future__ import annotations

import socket
import ssl
from asyncio import sslproto
from collections.abc import Callable

import pytest

from se_exporter.web.config import WebConfig
from se_exporter.web.server import WebServer
from tests.web.conftest import client_context
from tests.web.pki import PKI

TLS_CONFIG = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
MTLS_CONFIG = TLS_CONFIG + "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n"
Serve = Callable[..., WebServer]
WriteConfig = Callable[[str], WebConfig]


def refusal(server: WebServer, context: ssl.SSLContext) -> str:
    """What the client's TLS stack reports: the reason of the handshake's failure, or of the first read's."""
    raw = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    try:
        with context.wrap_socket(raw, server_hostname="127.0.0.1") as conn:
            conn.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            conn.recv(1024)  # TLS 1.3: the client's certificate is judged after the client's handshake ended
    except ssl.SSLError as error:
        return str(error.reason)
    except OSError as error:
        return f"no alert: {error!r}"
    return "accepted"


def test_a_client_of_an_older_tls_version_is_told_protocol_version(
    serve: Serve, write_config: WriteConfig, pki: PKI
) -> None:
    server = serve(write_config(TLS_CONFIG + "  min_version: TLS13\n"))
    assert refusal(server, client_context(pki, maximum_version=ssl.TLSVersion.TLSv1_2)) == (
        "TLSV1_ALERT_PROTOCOL_VERSION"
    )


def test_a_client_with_no_common_cipher_is_told_handshake_failure(
    serve: Serve, write_config: WriteConfig, pki: PKI
) -> None:
    server = serve(
        write_config(TLS_CONFIG + "  max_version: TLS12\n  cipher_suites: [TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256]\n")
    )
    client = client_context(pki, maximum_version=ssl.TLSVersion.TLSv1_2)
    client.set_ciphers("ECDHE-ECDSA-CHACHA20-POLY1305")
    assert refusal(server, client) == "SSLV3_ALERT_HANDSHAKE_FAILURE"


@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3])
def test_a_client_certificate_of_an_unknown_ca_is_told_so(
    serve: Serve, write_config: WriteConfig, pki: PKI, version: ssl.TLSVersion
) -> None:
    server = serve(write_config(MTLS_CONFIG))
    assert refusal(server, client_context(pki, "rogue", maximum_version=version)) == "TLSV1_ALERT_UNKNOWN_CA"
    assert refusal(server, client_context(pki, "client", maximum_version=version)) == "accepted"


def test_a_client_without_a_required_certificate_is_told_so(serve: Serve, write_config: WriteConfig, pki: PKI) -> None:
    server = serve(write_config(MTLS_CONFIG))
    assert refusal(server, client_context(pki)) in (
        "TLSV13_ALERT_CERTIFICATE_REQUIRED",
        "SSLV3_ALERT_HANDSHAKE_FAILURE",
    )


def test_the_private_names_of_asyncio_the_alert_needs_are_there() -> None:
    """``_on_handshake_complete`` and ``_process_outgoing`` (web/tls.py): no public hook sends the alert."""
    assert callable(sslproto.SSLProtocol._on_handshake_complete)
    assert callable(getattr(sslproto.SSLProtocol, "_process_outgoing", None))
