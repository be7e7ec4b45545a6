"""TLS of the web server, all of it: ``tls_server_config`` of the web config, its schema (``TLSServerSpec``),
the settings it resolves to (``TLSServerConfig``) and the SSL context they build (certificate, key, client
CA, versions and ciphers, checked as they load); the handshake (a refused client is told why, by a TLS
alert); what a plain-HTTP client on the TLS port is told; and the ``client_allowed_sans`` check of a verified
client certificate, after the handshake. ``web/config.py``'s ``LiveWebConfig`` rebuilds the context when the
settings or their files change.

SECURITY.md, *TLS and authentication*, has the subset of exporter-toolkit's format taken and where it differs.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import socket
import ssl
import tempfile
from asyncio import sslproto
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import msgspec

from se_exporter.common.files import MAX_FILE_BYTES, read_bounded
from se_exporter.config.schema import field_problem
from se_exporter.errors import ConfigError, os_problem, show

log = logging.getLogger(__name__)

CLIENT_AUTH_TYPES = ("NoClientCert", "VerifyClientCertIfGiven", "RequireAndVerifyClientCert")

_UNSUPPORTED_CLIENT_AUTH = ("RequestClientCert", "RequireAnyClientCert", "RequireClientCert")

TLS_VERSIONS = {"TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3}

_INSECURE_TLS_VERSIONS = ("TLS10", "TLS11")

CURVES = ("CurveP256", "CurveP384", "CurveP521", "X25519")


# Inline PEM beside a file: exporter-toolkit reads the file; so does se-exporter, saying the text is unused.
_INLINE_TWINS = (("cert", "cert_file"), ("key", "key_file"), ("client_ca", "client_ca_file"))


# Go's tls.CipherSuites() names -> OpenSSL names. TLS 1.3 suites map to None: Go ignores them in
# cipher_suites and so does OpenSSL's cipher list (TLS 1.3 suites are always the safe defaults).
CIPHER_SUITES: Mapping[str, str | None] = {
    "TLS_AES_128_GCM_SHA256": None,
    "TLS_AES_256_GCM_SHA384": None,
    "TLS_CHACHA20_POLY1305_SHA256": None,
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
}


@dataclass(frozen=True, slots=True)
class TLSServerConfig:
    """``tls_server_config`` with absolute paths (or the PEM inline); ``ssl_context()`` builds the server
    context."""

    cert_file: Path | None
    key_file: Path | None
    cert: str | None = field(default=None, repr=False)  # inline PEM when no cert_file
    key: str | None = field(default=None, repr=False)  # inline PEM when no key_file: a secret, never shown
    client_ca: str | None = field(default=None, repr=False)  # inline PEM when no client_ca_file
    client_auth_type: str = "NoClientCert"
    client_ca_file: Path | None = None
    client_allowed_sans: tuple[str, ...] = ()  # IP addresses in canonical form (parse_tls)
    min_version: ssl.TLSVersion = ssl.TLSVersion.TLSv1_2
    max_version: ssl.TLSVersion = ssl.TLSVersion.TLSv1_3
    cipher_suites: tuple[str, ...] = ()  # Go / IANA names, in preference order
    prefer_server_cipher_suites: bool = True
    source: str = field(default="<web config>", compare=False)

    @property
    def files(self) -> tuple[Path, ...]:
        """The files the context is built from (watched for certificate rotation)."""
        return tuple(path for path in (self.cert_file, self.key_file, self.client_ca_file) if path is not None)

    def ssl_context(self) -> ssl.SSLContext:
        """A fresh server context from the files as they are now; ``ConfigError`` if one is unusable."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = self.min_version
        context.maximum_version = self.max_version
        context.options |= ssl.OP_NO_COMPRESSION | ssl.OP_NO_RENEGOTIATION
        if self.prefer_server_cipher_suites:
            context.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
        else:  # Python sets it on every server context: the client's order wins only without it
            context.options &= ~ssl.OP_CIPHER_SERVER_PREFERENCE
        tls12 = [name for suite in self.cipher_suites if (name := CIPHER_SUITES[suite])]
        if tls12:
            try:
                context.set_ciphers(":".join(tls12))
            except ssl.SSLError as exc:
                self._fail("cipher_suites", f"OpenSSL accepts none of them: {exc}")
        context.set_alpn_protocols(["http/1.1"])  # http2 is accepted in the file but not served
        self._load_certificate(context)
        if self.client_auth_type != "NoClientCert":
            if self.client_ca_file is not None:
                self._load_client_ca(context, _read_text(self, "client_ca_file", self.client_ca_file), "client_ca_file")
            elif self.client_ca is not None:
                self._load_client_ca(context, self.client_ca, "client_ca")
            else:  # as exporter-toolkit: the system's trust store (a warning at load)
                context.load_default_certs(ssl.Purpose.CLIENT_AUTH)
            context.verify_mode = (
                ssl.CERT_REQUIRED if self.client_auth_type == "RequireAndVerifyClientCert" else ssl.CERT_OPTIONAL
            )
        return context

    def allows_peer(self, peer_certificate: Mapping[str, Any] | None) -> bool:
        """``client_allowed_sans``: the verified client certificate has one of the listed SANs."""
        if not self.client_allowed_sans:
            return True
        if not peer_certificate:
            return False
        names = {
            normalize_ip(str(value)) if kind == "IP Address" else str(value)
            for kind, value in peer_certificate.get("subjectAltName", ())
        }
        return not names.isdisjoint(self.client_allowed_sans)

    def _load_client_ca(self, context: ssl.SSLContext, ca_text: str, key: str) -> None:
        what = self.client_ca_file if key == "client_ca_file" else "the inline PEM"
        if "-----BEGIN CERTIFICATE-----" not in ca_text:
            self._fail(key, f"{what} contains no PEM certificate")
        try:
            context.load_verify_locations(cadata=ca_text)  # from memory: the same text that was checked
        except (ssl.SSLError, ValueError) as exc:
            self._fail(key, f"cannot load {what}: {_ssl_problem(exc)}")

    def _load_certificate(self, context: ssl.SSLContext) -> None:
        cert_key, cert_text = self._pem("cert_file", self.cert_file, "cert", self.cert)
        cert_what = self.cert_file or "the inline PEM"
        if "-----BEGIN CERTIFICATE-----" not in cert_text:
            self._fail(cert_key, f"{cert_what} contains no PEM certificate")
        try:  # parse the certificates alone first, so a broken one is blamed on the certificate
            ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cadata=cert_text)
        except (ssl.SSLError, ValueError) as exc:
            self._fail(cert_key, f"{cert_what} is not a valid PEM certificate: {_ssl_problem(exc)}")
        key_key, key_text = self._pem("key_file", self.key_file, "key", self.key)
        key_what = self.key_file or "the inline PEM"
        if "PRIVATE KEY-----" not in key_text:
            self._fail(key_key, f"{key_what} contains no PEM private key")
        if "ENCRYPTED" in key_text:
            self._fail(key_key, f"{key_what} is encrypted; se-exporter needs an unencrypted key")

        def no_password() -> str:  # never prompt on the terminal
            raise ConfigError("encrypted key")

        try:
            if self.cert_file is not None and self.key_file is not None:
                context.load_cert_chain(str(self.cert_file), str(self.key_file), password=no_password)
            else:  # the ssl module loads a chain from files only
                with private_pem_file(cert_text + "\n" + key_text) as chain:
                    context.load_cert_chain(chain, password=no_password)
        except (ssl.SSLError, OSError, ConfigError) as exc:
            self._fail(key_key, f"cannot use {key_what} with {cert_what}: {_ssl_problem(exc)}")

    def _pem(self, file_key: str, path: Path | None, inline_key: str, inline: str | None) -> tuple[str, str]:
        """(the key it comes from, the PEM text) of the file, else of the inline text."""
        if path is not None:
            return file_key, _read_text(self, file_key, path)
        return inline_key, inline or ""

    def _fail(self, key: str, problem: str) -> NoReturn:
        raise ConfigError(f"web config {self.source}: tls_server_config.{key}: {problem}")


@contextlib.contextmanager
def private_pem_file(text: str) -> Iterator[str]:
    """A path holding ``text`` that only this process can read, gone on exit: a memory file on Linux
    (/proc/self/fd, never on a disk), else a 0600 temporary file, removed at once."""
    if hasattr(os, "memfd_create") and os.path.isdir("/proc/self/fd"):
        fd = os.memfd_create("se-exporter-tls", getattr(os, "MFD_CLOEXEC", 0))
        try:
            os.write(fd, text.encode("ascii", "replace"))
            yield f"/proc/self/fd/{fd}"
        finally:
            os.close(fd)
        return
    fd, path = tempfile.mkstemp(prefix="se-exporter-tls-", suffix=".pem")  # 0600, as mkstemp makes it
    try:
        with os.fdopen(fd, "w", encoding="ascii", errors="replace") as file:
            file.write(text)
        yield path
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)


def _read_text(config: TLSServerConfig, key: str, path: Path) -> str:
    try:
        return read_bounded(path, MAX_FILE_BYTES).decode("ascii", errors="replace")
    except OSError as exc:
        config._fail(key, f"cannot read {path}: {os_problem(exc)}")


def _ssl_problem(exc: Exception) -> str:
    if isinstance(exc, ssl.SSLError) and exc.reason:
        return f"{exc.library or 'SSL'}: {exc.reason}"
    return str(exc)


def normalize_ip(value: str) -> str:
    """An IP address in canonical form ("::0001" and "::1" compare equal); anything else unchanged."""
    try:
        return str(ipaddress.ip_address(value.strip()))
    except ValueError:
        return value


class TLSServerSpec(msgspec.Struct, forbid_unknown_fields=True):
    """``tls_server_config`` as written; ``""`` means unset, as in exporter-toolkit."""

    cert_file: str | None = None
    key_file: str | None = None
    client_auth_type: str | None = None
    client_ca_file: str | None = None
    client_allowed_sans: tuple[str, ...] = ()
    min_version: str | None = None
    max_version: str | None = None
    cipher_suites: tuple[str, ...] = ()
    prefer_server_cipher_suites: bool = True
    curve_preferences: tuple[str, ...] = ()
    cert: str | None = None  # inline PEM, as exporter-toolkit takes it (the file wins when both are set)
    key: str | None = None
    client_ca: str | None = None

    def __post_init__(self) -> None:
        if self.empty:
            return  # plain HTTP
        for inline, file in _INLINE_TWINS[:2]:
            if not getattr(self, file) and not getattr(self, inline):
                raise field_problem(file, f"is required (or {inline}: the PEM inline)")
        self._check_client_auth()
        _known("cipher_suites", self.cipher_suites, tuple(CIPHER_SUITES))
        _known("curve_preferences", self.curve_preferences, CURVES)
        low, high = self.versions
        if low > high:
            raise field_problem("min_version", "is greater than max_version")

    @property
    def auth(self) -> str:
        """``client_auth_type``, its default filled in."""
        return self.client_auth_type or "NoClientCert"

    @property
    def versions(self) -> tuple[ssl.TLSVersion, ssl.TLSVersion]:
        """``min_version`` and ``max_version``, their defaults filled in (refused if insecure or unknown)."""
        return _version("min_version", self.min_version, "TLS12"), _version("max_version", self.max_version, "TLS13")

    @property
    def empty(self) -> bool:
        """``tls_server_config: {}``: nothing set."""
        return all(
            getattr(self, name) == default
            for name, default in zip(self.__struct_fields__, self.__struct_defaults__, strict=True)
        )

    def _check_client_auth(self) -> None:
        auth = self.auth
        if auth in _UNSUPPORTED_CLIENT_AUTH:
            raise field_problem(
                "client_auth_type",
                f"{auth} accepts a client certificate without verifying it and "
                "is not supported; use RequireAndVerifyClientCert (or VerifyClientCertIfGiven) "
                "with client_ca_file",
            )
        if auth not in CLIENT_AUTH_TYPES:
            raise field_problem("client_auth_type", f"must be one of {', '.join(CLIENT_AUTH_TYPES)}, got {show(auth)}")
        ca_key = "client_ca_file" if self.client_ca_file else "client_ca"
        if (self.client_ca_file or self.client_ca) and auth == "NoClientCert":
            raise field_problem(ca_key, "is set but client_auth_type is NoClientCert: set RequireAndVerifyClientCert")
        if self.client_allowed_sans and auth != "RequireAndVerifyClientCert":
            raise field_problem("client_allowed_sans", "requires client_auth_type RequireAndVerifyClientCert")


def tls_config(spec: TLSServerSpec | None, source: str, base: Path) -> TLSServerConfig | None:
    """The validated section with its paths resolved against ``base``; None for plain HTTP."""
    if spec is None or spec.empty:
        return None
    auth = spec.auth
    for inline, file in _INLINE_TWINS:
        if getattr(spec, inline) and getattr(spec, file):
            log.warning(
                f"web config: tls_server_config.{inline} is unused: {file} is set too, and is read instead",
                extra={"file": source},
            )
    if auth != "NoClientCert" and not spec.client_ca_file and not spec.client_ca:
        log.warning(
            f"web config: tls_server_config.client_auth_type {auth} without client_ca_file: client certificates "
            "are verified against the system's trust store, so any publicly trusted certificate passes; set "
            "client_ca_file (your own CA) and client_allowed_sans to admit only your clients",
            extra={"file": source},
        )
    if spec.curve_preferences:
        log.warning(
            "web config: tls_server_config.curve_preferences is accepted but ignored; OpenSSL's default "
            "groups are used",
            extra={"file": source},
        )
    return TLSServerConfig(
        cert_file=_resolve(base, spec.cert_file) if spec.cert_file else None,
        key_file=_resolve(base, spec.key_file) if spec.key_file else None,
        cert=None if spec.cert_file else spec.cert,
        key=None if spec.key_file else spec.key,
        client_ca=None if spec.client_ca_file else spec.client_ca,
        client_auth_type=auth,
        client_ca_file=_resolve(base, spec.client_ca_file) if spec.client_ca_file else None,
        client_allowed_sans=tuple(normalize_ip(san) for san in spec.client_allowed_sans),  # once, not per handshake
        min_version=spec.versions[0],
        max_version=spec.versions[1],
        cipher_suites=spec.cipher_suites,
        prefer_server_cipher_suites=spec.prefer_server_cipher_suites,
        source=source,
    )


def _resolve(base: Path, value: str) -> Path:
    return base / Path(value).expanduser()  # an absolute value replaces base


def _version(key: str, value: str | None, default: str) -> ssl.TLSVersion:
    value = value or default
    if value in _INSECURE_TLS_VERSIONS:
        raise field_problem(key, f"{value} is not supported (insecure); use TLS12 or TLS13")
    if value not in TLS_VERSIONS:
        raise field_problem(key, f"must be one of {', '.join(TLS_VERSIONS)}, got {show(value)}")
    return TLS_VERSIONS[value]


def _known(key: str, values: tuple[str, ...], known: tuple[str, ...]) -> None:
    for index, value in enumerate(values):
        if value not in known:
            raise field_problem(key, f"unknown value {show(value)}; known values: {', '.join(known)}", index)


HANDSHAKE_TIMEOUT_SECONDS = 10.0  # a client that has not finished the TLS handshake by then is dropped


def refusal(config: TLSServerConfig | None, writer: asyncio.StreamWriter, client: str) -> str | None:
    """Why a TLS client's requests are refused (403) once it is in: a verified certificate without any of
    ``client_allowed_sans`` of the ``config`` in force (Python checks those only after the handshake, where Go
    refuses in it)."""
    if config is None or config.allows_peer(writer.get_extra_info("peercert")):
        return None
    log.warning("client certificate has none of client_allowed_sans; refused", extra={"client": client})
    return "the client certificate has none of the names in client_allowed_sans"


class _AlertingSSLProtocol(sslproto.SSLProtocol):
    """asyncio's TLS protocol, sending the alert of a failed handshake before the connection closes.

    asyncio drops what OpenSSL wrote when the handshake fails (the alert that says why: protocol version, no
    shared cipher, unknown CA), so the client reads EOF where Go's client says "protocol version not
    supported". The alert is written out first. ``_on_handshake_complete`` and ``_process_outgoing`` are
    asyncio's private methods (no public hook exists), pinned by tests/web/test_tls_alerts.py.
    """

    def _on_handshake_complete(self, handshake_exc: BaseException | None) -> None:
        if handshake_exc is not None:
            with contextlib.suppress(Exception):
                self._process_outgoing()  # type: ignore[attr-defined]
        super()._on_handshake_complete(handshake_exc)


class _Connected(asyncio.StreamReaderProtocol):
    """The stream protocol, keeping the TLS transport it is handed once the handshake succeeds."""

    transport: asyncio.BaseTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        super().connection_made(transport)


async def handshake(
    sock: socket.socket,
    reader: asyncio.StreamReader,
    context: ssl.SSLContext,
    *,
    timeout: float,
    shutdown_timeout: float,
) -> asyncio.StreamWriter:
    """The server side of the TLS handshake on ``sock``: a writer (``reader`` reads the connection), or an
    ``OSError`` once the client was told why it failed."""
    loop = asyncio.get_running_loop()
    protocol = _Connected(reader)
    waiter: asyncio.Future[Any] = loop.create_future()
    tls = _AlertingSSLProtocol(
        loop,
        protocol,
        context,
        waiter,
        server_side=True,
        ssl_handshake_timeout=timeout,  # type: ignore[arg-type]  # typeshed says int; asyncio takes seconds
        ssl_shutdown_timeout=shutdown_timeout,
    )
    raw, _ = await loop.connect_accepted_socket(lambda: tls, sock)
    try:
        await waiter
    except BaseException:
        raw.abort()
        raise
    if not isinstance(protocol.transport, asyncio.WriteTransport):
        raw.abort()
        raise ConnectionAbortedError("the TLS handshake ended without a connection")
    return asyncio.StreamWriter(protocol.transport, protocol, reader, loop)


def is_tls_hello(sock: socket.socket) -> bool:
    """Whether what the client sent first (peeked, not read) opens a TLS handshake record."""
    try:
        first = sock.recv(1, socket.MSG_PEEK)
    except (BlockingIOError, InterruptedError):
        return True  # nothing yet after all: let the handshake wait for it
    return first == b"\x16"


def answer_plain_http(sock: socket.socket) -> None:
    """Tell a plain-HTTP client what went wrong, in cleartext, as Go's net/http does."""
    body = b"Client sent an HTTP request to an HTTPS server.\n"
    head = b"HTTP/1.0 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n"
    with contextlib.suppress(OSError):
        sock.send(head + b"Content-Length: %d\r\n\r\n" % len(body) + body)  # small: fits any socket buffer
