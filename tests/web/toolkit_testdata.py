"""exporter-toolkit's ``web/testdata``, in the same shapes, made at test time: an RSA CA chain and server
certificate (the toolkit's cipher cases name ``TLS_ECDHE_RSA_*`` suites), two self-signed client
certificates (``client2_selfsigned`` with SANs), bcrypt users, and one web config file per fixture of its,
named as the toolkit names them."""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

import bcrypt
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.web.pki import key_usage

_DAY = datetime.timedelta(days=1)
USERS = {"alice": "alice123", "bob": "bob123", "carol": "carol123", "dave": "dave123"}
CLIENT2_SANS = ("client2.example", "Test-Client2")
ALL_CIPHERS = (
    "TLS_AES_128_GCM_SHA256",
    "TLS_AES_256_GCM_SHA384",
    "TLS_CHACHA20_POLY1305_SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
)
TLS = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
SOME_CIPHERS = (
    TLS + "  max_version: TLS12\n  cipher_suites:\n"
    "    - TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256\n    - TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384\n"
)


def _key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _cert(
    subject: str,
    key: rsa.RSAPrivateKey,
    issuer: tuple[x509.Name, rsa.RSAPrivateKey] | None,
    *,
    ca: bool,
    sans: list[x509.GeneralName],
    usage: x509.ObjectIdentifier | None,
) -> x509.Certificate:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    issuer_name, signer = issuer or (name, key)
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _DAY)
        .not_valid_after(now + _DAY)
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        # What a strict verifier asks (Python 3.13's default context on Windows sets VERIFY_X509_STRICT):
        # key usages, and the key identifiers that chain a certificate to its issuer.
        .add_extension(key_usage(ca=ca), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(signer.public_key()), critical=False)
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    if usage is not None:
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    return builder.sign(signer, hashes.SHA256())


def _write(directory: Path, stem: str, cert: x509.Certificate, key: rsa.RSAPrivateKey, cert_suffix: str) -> None:
    (directory / f"{stem}{cert_suffix}").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (directory / f"{stem}.key").write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )


def _inline(path: Path) -> str:
    return "|\n" + "".join(f"    {line}\n" for line in path.read_text().splitlines())


def make_testdata(directory: Path) -> Path:
    """The certificates and every config fixture in ``directory``; returns it."""
    ca_key, server_key = _key(), _key()
    ca = _cert("Prometheus Test CA", ca_key, None, ca=True, sans=[], usage=None)
    (directory / "tls-ca-chain.pem").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    server_sans: list[x509.GeneralName] = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    server = _cert("localhost", server_key, (ca.subject, ca_key), ca=False, sans=server_sans, usage=None)
    _write(directory, "server", server, server_key, ".crt")
    for stem, sans in (("client_selfsigned", ()), ("client2_selfsigned", CLIENT2_SANS)):
        key = _key()
        cert = _cert(
            "Test-Client",
            key,
            None,
            ca=True,
            sans=[x509.DNSName(s) for s in sans],
            usage=ExtendedKeyUsageOID.CLIENT_AUTH,
        )
        _write(directory, stem, cert, key, ".pem")
    users = "".join(
        f"  {user}: {bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()}\n"
        for user, password in USERS.items()
    )
    for name, text in _configs(directory, users).items():
        (directory / name).write_text(text)
    return directory


def _configs(directory: Path, users: str) -> dict[str, str]:
    requireandverify = TLS + "  client_auth_type: RequireAndVerifyClientCert\n"
    return {
        "web_config_empty.yml": "",
        "web_config_junk.yml": "hello:world\n",
        "web_config_junk_key.yml": TLS + "  cert_filse: server.crt\n",
        "web_config_noAuth_certPath_empty.bad.yml": 'tls_server_config:\n  cert_file: ""\n  key_file: server.key\n',
        "web_config_noAuth_cert_empty.bad.yml": 'tls_server_config:\n  cert: ""\n  key_file: server.key\n',
        "web_config_noAuth_keyPath_empty.bad.yml": 'tls_server_config:\n  cert_file: server.crt\n  key_file: ""\n',
        "web_config_noAuth_key_empty.bad.yml": 'tls_server_config:\n  cert_file: server.crt\n  key: ""\n',
        "web_config_noAuth_certPath_keyPath_empty.bad.yml": (
            'tls_server_config:\n  cert_file: ""\n  key_file: ""\n  client_ca_file: tls-ca-chain.pem\n'
            "  client_auth_type: RequireAndVerifyClientCert\n"
        ),
        "web_config_noAuth_certPath_invalid.bad.yml": (
            "tls_server_config:\n  cert_file: somefile\n  key_file: server.key\n"
        ),
        "web_config_noAuth_keyPath_invalid.bad.yml": (
            "tls_server_config:\n  cert_file: server.crt\n  key_file: somefile\n"
        ),
        "web_config_noAuth_certPath_keyPath_invalid.bad.yml": (
            "tls_server_config:\n  cert_file: somefile\n  key_file: somefile\n"
        ),
        "web_config_noAuth.bad.yml": TLS + "  client_ca_file: tls-ca-chain.pem\n",
        "web_config_auth_clientCAs_invalid.bad.yml": requireandverify + "  client_ca_file: somefile\n",
        "web_config_auth_user_list_invalid.bad.yml": TLS + "basic_auth_users:\n  john: doe\n",
        "web_config_noAuth_inventedCiphers.bad.yml": TLS + "  cipher_suites: [TLS_RSA_WITH_ALL_CIPHERS]\n",
        "web_config_noAuth_inventedCurves.bad.yml": TLS + "  curve_preferences: [CurveP257]\n",
        "web_config_noAuth_wrongTLSVersion.bad.yml": TLS + "  min_version: TLS111\n",
        "web_config_noAuth.good.yml": TLS,
        "web_config_noAuth_tlsInline.good.yml": (
            f"tls_server_config:\n  cert: {_inline(directory / 'server.crt')}  key: {_inline(directory / 'server.key')}"
        ),
        "web_config_noAuth_allCiphers.good.yml": TLS
        + "  cipher_suites:\n"
        + "".join(f"    - {c}\n" for c in ALL_CIPHERS),
        "web_config_noAuth_someCiphers.good.yml": SOME_CIPHERS,
        "web_config_noAuth_someCiphers_noOrder.good.yml": SOME_CIPHERS + "  prefer_server_cipher_suites: false\n",
        "web_config_noAuth_allCurves.good.yml": TLS
        + "  curve_preferences: [CurveP256, CurveP384, CurveP521, X25519]\n",
        "web_config_noAuth_someCurves.good.yml": TLS + "  curve_preferences: [CurveP521]\n",
        "web_config_noAuth_noHTTP2.good.yml": (
            TLS + "  cipher_suites: [TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA]\nhttp_server_config:\n  http2: false\n"
        ),
        "web_config_noAuth_noHTTP2Cipher.bad.yml": TLS + "  cipher_suites: [TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA]\n",
        "web_config_headers.good.yml": (
            "http_server_config:\n  headers:\n    Strict-Transport-Security: max-age=31536000; includeSubDomains\n"
            "    X-Frame-Options: deny\n    X-Content-Type-Options: nosniff\n    X-XSS-Protection: 1\n"
        ),
        "web_config_headers_content_type_options.bad.yml": (
            "http_server_config:\n  headers:\n    X-Content-Type-Options: nosniff,bad\n"
        ),
        "web_config_headers_frame_options.bad.yml": "http_server_config:\n  headers:\n    X-Frame-Options: foo\n",
        "web_config_headers_extra_header.bad.yml": "http_server_config:\n  headers:\n    Server: Prometheus\n",
        "tls_config_noAuth.requireanyclientcert.good.yml": TLS + "  client_auth_type: RequireAnyClientCert\n",
        "tls_config_noAuth.requireandverifyclientcert.good.yml": requireandverify
        + "  client_ca_file: client_selfsigned.pem\n",
        "web_config_auth_client_san.good.yaml": requireandverify
        + f"  client_ca_file: client2_selfsigned.pem\n  client_allowed_sans: [{CLIENT2_SANS[0]}]\n",
        "web_config_auth_client_san.bad.yaml": requireandverify
        + "  client_ca_file: client2_selfsigned.pem\n  client_allowed_sans: [someone-else.example]\n",
        "web_config_rate_limiter_nonblocking.yaml": "rate_limit:\n  interval: 0s\n  burst: 0\n",
        "web_config_rate_limiter_one_second.yaml": "rate_limit:\n  interval: 1s\n  burst: 10\n",
        "web_config_users_noTLS.good.yml": "basic_auth_users:\n" + users,
        "web_config_users.good.yml": TLS + "basic_auth_users:\n" + users,
        "web_config_noAuth.good.blocking.yml": requireandverify + "  client_ca_file: client_selfsigned.pem\n",
    }
