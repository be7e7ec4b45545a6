"""The web configuration file (``--web.config.file``): TLS, basic auth and response headers.

The format is the Prometheus exporter-toolkit one
(https://github.com/prometheus/exporter-toolkit/blob/master/docs/web-configuration.md), so a file
written for node_exporter works here. ``load_web_config`` validates it completely at start-up: every
problem is a ``ConfigError`` of the form ``web config <file>: <key path>: <problem>``, and the
certificates and keys are loaded once so that a broken one stops the exporter before it listens.

Supported subset, and where se-exporter differs from exporter-toolkit (all differences fail closed):

- ``tls_server_config``: ``cert_file``, ``key_file``, ``client_ca_file`` (relative paths resolve
  against the directory of the configuration file), ``client_auth_type`` (``NoClientCert``,
  ``VerifyClientCertIfGiven``, ``RequireAndVerifyClientCert``), ``client_allowed_sans``,
  ``min_version`` / ``max_version`` (``TLS12``, ``TLS13``), ``cipher_suites`` (Go names; applied to
  TLS 1.2, TLS 1.3 suites are accepted and have no effect, as in Go), ``prefer_server_cipher_suites``.
  ``curve_preferences`` is validated and ignored (Python's ssl module cannot set a group list),
  with a logged note.
  Rejected with a clear error: inline ``cert``/``key``/``client_ca`` (Python's ssl module loads
  certificate chains from files only; keeping secrets out of the YAML is better anyway),
  ``RequestClientCert``/``RequireAnyClientCert`` (they accept a client certificate without
  verifying it, which Python's ssl cannot do and which authenticates nobody), ``TLS10``/``TLS11``,
  and a non-empty ``tls_server_config`` without ``cert_file``/``key_file`` (exporter-toolkit falls
  back to plain HTTP there; a half-written TLS section must not silently serve cleartext).
- ``http_server_config``: ``headers`` (only the headers exporter-toolkit allows, with its value
  checks; a blank value means unset), ``http2`` (accepted and ignored: se-exporter speaks HTTP/1.x).
- ``basic_auth_users``: user name -> bcrypt hash (``$2a$``, ``$2b$`` or ``$2y$``, as made by
  ``htpasswd -nBC 10 "" | tr -d ':\\n'``). Every path requires valid credentials when users are set,
  except those listed in ``auth_excluded_paths`` (exact paths, as in recent exporter-toolkit; e.g.
  ``[/-/healthy, /-/ready]`` for kubelet probes and the Docker HEALTHCHECK).
- ``rate_limit`` is rejected as not supported.
"""

from __future__ import annotations

import importlib.util
import ipaddress
import logging
import os
import re
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import yaml

from se_exporter.errors import ConfigError

log = logging.getLogger(__name__)

CLIENT_AUTH_TYPES = ("NoClientCert", "VerifyClientCertIfGiven", "RequireAndVerifyClientCert")
_UNSUPPORTED_CLIENT_AUTH = ("RequestClientCert", "RequireAnyClientCert", "RequireClientCert")
TLS_VERSIONS = {"TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3}
_INSECURE_TLS_VERSIONS = ("TLS10", "TLS11")

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
CURVES = ("CurveP256", "CurveP384", "CurveP521", "X25519")

# exporter-toolkit's extraHTTPHeaders: the only headers that may be configured, and, for some, the
# only values. Kept identical on purpose (consistency across the Prometheus ecosystem).
ALLOWED_HEADERS: Mapping[str, tuple[str, ...] | None] = {
    "Strict-Transport-Security": None,
    "X-Content-Type-Options": ("nosniff",),
    "X-Frame-Options": ("deny", "sameorigin"),
    "X-XSS-Protection": None,
    "Content-Security-Policy": None,
}

_TOP_KEYS = ("tls_server_config", "http_server_config", "basic_auth_users", "auth_excluded_paths")
_TLS_KEYS = (
    "cert_file",
    "key_file",
    "client_auth_type",
    "client_ca_file",
    "client_allowed_sans",
    "min_version",
    "max_version",
    "cipher_suites",
    "prefer_server_cipher_suites",
    "curve_preferences",
)
_HTTP_KEYS = ("http2", "headers")
_UNSUPPORTED_KEYS = {
    "rate_limit": "is not supported by se-exporter (rate-limit in a reverse proxy or by network policy instead)",
    "tls_server_config.cert": "inline certificates are not supported by se-exporter; use cert_file",
    "tls_server_config.key": "inline keys are not supported by se-exporter; use key_file",
    "tls_server_config.client_ca": "inline client CAs are not supported by se-exporter; use client_ca_file",
}
# $2a$/$2b$/$2y$, a two-digit cost, 22 characters of salt and 31 of hash in bcrypt's base64.
_BCRYPT_HASH = re.compile(r"^\$2[aby]\$(\d\d)\$[./A-Za-z0-9]{53}$")
_BCRYPT_COSTS = range(4, 32)
_HEADER_VALUE = re.compile(r"^[\x20-\x7e\t]*$")  # visible ASCII, space and tab: no CR/LF injection


@dataclass(frozen=True, slots=True)
class TLSServerConfig:
    """``tls_server_config`` with absolute paths; ``ssl_context()`` builds the server context."""

    cert_file: Path
    key_file: Path
    client_auth_type: str = "NoClientCert"
    client_ca_file: Path | None = None
    client_allowed_sans: tuple[str, ...] = ()
    min_version: ssl.TLSVersion = ssl.TLSVersion.TLSv1_2
    max_version: ssl.TLSVersion = ssl.TLSVersion.TLSv1_3
    cipher_suites: tuple[str, ...] = ()  # Go / IANA names, in preference order
    prefer_server_cipher_suites: bool = True
    source: str = field(default="<web config>", compare=False)

    @property
    def files(self) -> tuple[Path, ...]:
        """The files the context is built from (watched for certificate rotation)."""
        return (self.cert_file, self.key_file, *((self.client_ca_file,) if self.client_ca_file else ()))

    def ssl_context(self) -> ssl.SSLContext:
        """A fresh server context from the files as they are now; ``ConfigError`` if one is unusable."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = self.min_version
        context.maximum_version = self.max_version
        context.options |= ssl.OP_NO_COMPRESSION | ssl.OP_NO_RENEGOTIATION
        if self.prefer_server_cipher_suites:
            context.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
        tls12 = [name for suite in self.cipher_suites if (name := CIPHER_SUITES[suite])]
        if tls12:
            try:
                context.set_ciphers(":".join(tls12))
            except ssl.SSLError as exc:
                self._fail("cipher_suites", f"OpenSSL accepts none of them: {exc}")
        context.set_alpn_protocols(["http/1.1"])  # http2 is accepted in the file but not served
        self._load_certificate(context)
        if self.client_auth_type != "NoClientCert":
            assert self.client_ca_file is not None  # enforced by the loader
            ca_text = _read_text(self, "client_ca_file", self.client_ca_file)
            if "-----BEGIN CERTIFICATE-----" not in ca_text:
                self._fail("client_ca_file", f"{self.client_ca_file} contains no PEM certificate")
            try:
                context.load_verify_locations(cafile=str(self.client_ca_file))
            except (ssl.SSLError, OSError) as exc:
                self._fail("client_ca_file", f"cannot load {self.client_ca_file}: {_ssl_problem(exc)}")
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
        names = {_normalize_san(kind, str(value)) for kind, value in peer_certificate.get("subjectAltName", ())}
        return any(_normalize_san_any(allowed) in names for allowed in self.client_allowed_sans)

    def _load_certificate(self, context: ssl.SSLContext) -> None:
        cert_text = _read_text(self, "cert_file", self.cert_file)
        if "-----BEGIN CERTIFICATE-----" not in cert_text:
            self._fail("cert_file", f"{self.cert_file} contains no PEM certificate")
        try:  # parse the certificates alone first, so a broken one is blamed on cert_file
            ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cadata=cert_text)
        except (ssl.SSLError, ValueError) as exc:
            self._fail("cert_file", f"{self.cert_file} is not a valid PEM certificate: {_ssl_problem(exc)}")
        key_text = _read_text(self, "key_file", self.key_file)
        if "PRIVATE KEY-----" not in key_text:
            self._fail("key_file", f"{self.key_file} contains no PEM private key")
        if "ENCRYPTED" in key_text:
            self._fail("key_file", f"{self.key_file} is encrypted; se-exporter needs an unencrypted key")

        def no_password() -> str:  # never prompt on the terminal
            raise ConfigError("encrypted key")

        try:
            context.load_cert_chain(str(self.cert_file), str(self.key_file), password=no_password)
        except (ssl.SSLError, OSError, ConfigError) as exc:
            self._fail("key_file", f"cannot use {self.key_file} with {self.cert_file}: {_ssl_problem(exc)}")

    def _fail(self, key: str, problem: str) -> NoReturn:
        raise ConfigError(f"web config {self.source}: tls_server_config.{key}: {problem}")


@dataclass(frozen=True, slots=True)
class WebConfig:
    """A validated web configuration file. ``WebConfig()`` is plain HTTP, no auth, no extra headers."""

    tls: TLSServerConfig | None = None
    headers: tuple[tuple[str, str], ...] = ()
    basic_auth_users: Mapping[str, str] = field(default_factory=dict, repr=False)  # user -> bcrypt hash
    auth_excluded_paths: frozenset[str] = frozenset()  # exact paths served without basic auth
    source: str = field(default="<web config>", compare=False)

    @property
    def scheme(self) -> str:
        return "https" if self.tls else "http"


def load_web_config(path: str | os.PathLike[str]) -> WebConfig:
    """Read, validate and return the web configuration at ``path``; ``ConfigError`` on any problem."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"web config {source}: cannot read the file: {_os_problem(exc)}") from None
    config = parse_web_config(text, source=source, base_dir=Path(path).resolve().parent)
    if config.basic_auth_users and importlib.util.find_spec("bcrypt") is None:
        raise ConfigError(f"web config {source}: basic_auth_users: needs the Python package bcrypt, not installed")
    if config.tls:
        config.tls.ssl_context()  # load the certificate, key and client CA now: fail before listening
    _log_summary(config)
    return config


def parse_web_config(text: str, *, source: str = "<web config>", base_dir: Path | None = None) -> WebConfig:
    """Validate the YAML ``text``; relative paths resolve against ``base_dir`` (default: the cwd).

    Files are not opened here (``load_web_config`` does that, through ``TLSServerConfig.ssl_context``).
    """
    base = base_dir or Path.cwd()
    try:
        data = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise ConfigError(f"web config {source}: not valid YAML: {exc}") from None
    top = _Fields(source, "", {} if data is None else data, _TOP_KEYS)
    tls = _parse_tls(source, top.get("tls_server_config"), base)
    headers: tuple[tuple[str, str], ...] = ()
    http = top.get("http_server_config")
    if http is not None:
        fields = _Fields(source, "http_server_config", http, _HTTP_KEYS)
        fields.boolean("http2", default=True)  # accepted for compatibility; HTTP/2 is not served
        headers = _parse_headers(fields.sub("headers", fields.get("headers")))
    raw_users = top.get("basic_auth_users")
    users = _parse_users(_Fields(source, "basic_auth_users", {} if raw_users is None else raw_users, None))
    excluded = top.string_list("auth_excluded_paths")
    for index, path in enumerate(excluded):
        if not path.startswith("/"):
            top.fail(f"auth_excluded_paths[{index}]", f"must be a path starting with /, got {_show(path)}")
    if excluded and not users:
        top.fail("auth_excluded_paths", "is set but basic_auth_users is empty, so nothing is authenticated")
    return WebConfig(
        tls=tls, headers=headers, basic_auth_users=users, auth_excluded_paths=frozenset(excluded), source=source
    )


def _parse_tls(source: str, value: object, base: Path) -> TLSServerConfig | None:
    if value is None or value == {}:
        return None
    f = _Fields(source, "tls_server_config", value, _TLS_KEYS)
    cert_file = f.path("cert_file", base, required=True)
    key_file = f.path("key_file", base, required=True)
    assert cert_file is not None and key_file is not None
    client_auth = f.string("client_auth_type") or "NoClientCert"
    if client_auth in _UNSUPPORTED_CLIENT_AUTH:
        f.fail(
            "client_auth_type",
            f"{client_auth} accepts a client certificate without verifying it and is not supported; "
            "use RequireAndVerifyClientCert (or VerifyClientCertIfGiven) with client_ca_file",
        )
    if client_auth not in CLIENT_AUTH_TYPES:
        f.fail("client_auth_type", f"must be one of {', '.join(CLIENT_AUTH_TYPES)}, got {_show(client_auth)}")
    client_ca = f.path("client_ca_file", base)
    if client_ca is not None and client_auth == "NoClientCert":
        f.fail("client_ca_file", "is set but client_auth_type is NoClientCert: set RequireAndVerifyClientCert")
    if client_ca is None and client_auth != "NoClientCert":
        f.fail("client_ca_file", f"is required with client_auth_type {client_auth}")
    sans = f.string_list("client_allowed_sans")
    if sans and client_auth != "RequireAndVerifyClientCert":
        f.fail("client_allowed_sans", "requires client_auth_type RequireAndVerifyClientCert")
    min_version = f.tls_version("min_version", "TLS12")
    max_version = f.tls_version("max_version", "TLS13")
    if min_version > max_version:
        f.fail("min_version", "is greater than max_version")
    ciphers = f.string_list("cipher_suites", choices=tuple(CIPHER_SUITES))
    curves = f.string_list("curve_preferences", choices=CURVES)
    if curves:
        log.warning(
            "web config: tls_server_config.curve_preferences is accepted but ignored; OpenSSL's default "
            "groups are used", extra={"file": source},
        )
    return TLSServerConfig(
        cert_file=cert_file,
        key_file=key_file,
        client_auth_type=client_auth,
        client_ca_file=client_ca,
        client_allowed_sans=sans,
        min_version=min_version,
        max_version=max_version,
        cipher_suites=ciphers,
        prefer_server_cipher_suites=f.boolean("prefer_server_cipher_suites", default=True),
        source=source,
    )


def _parse_headers(f: _Fields | None) -> tuple[tuple[str, str], ...]:
    if f is None:
        return ()
    headers: list[tuple[str, str]] = []
    for name, value in f.data.items():
        if name not in ALLOWED_HEADERS:
            f.fail(name, f"this HTTP header can not be configured; allowed: {', '.join(ALLOWED_HEADERS)}")
        if value is None or value == "":
            continue  # blank means unset, as in exporter-toolkit
        if not isinstance(value, str) or not _HEADER_VALUE.match(value):
            f.fail(name, f"must be a string of printable ASCII characters, got {_show(value)}")
        allowed = ALLOWED_HEADERS[name]
        if allowed is not None and value not in allowed:
            f.fail(name, f"must be one of {', '.join(allowed)}, got {_show(value)}")
        headers.append((name, value))
    return tuple(headers)


def _parse_users(f: _Fields) -> dict[str, str]:
    users: dict[str, str] = {}
    for user, hashed in f.data.items():
        if not user or ":" in user:
            f.fail(user, "user names must be non-empty and must not contain ':' (basic auth cannot carry it)")
        match = _BCRYPT_HASH.match(hashed) if isinstance(hashed, str) else None
        if match is None or not isinstance(hashed, str) or int(match.group(1)) not in _BCRYPT_COSTS:
            # Never echo the value: it may be a plaintext password put there by mistake.
            f.fail(user, "is not a bcrypt hash (expected $2y$10$ followed by 53 characters, e.g. from "
                         "htpasswd -nBC 10 \"\" | tr -d ':\\n'); the value is not shown")
        users[user] = hashed
    return users


def _log_summary(config: WebConfig) -> None:
    tls = config.tls
    log.info(
        "web config loaded",
        extra={
            "file": config.source,
            "tls": bool(tls),
            "client_auth": tls.client_auth_type if tls else "none",
            "basic_auth_users": len(config.basic_auth_users),
            "auth_excluded_paths": sorted(config.auth_excluded_paths),
            "headers": [name for name, _ in config.headers],
        },
    )


class _Fields:
    """One mapping of the file: unknown keys are errors, typed getters name the key on error."""

    def __init__(self, source: str, where: str, value: object, allowed: Sequence[str] | None) -> None:
        self.source = source
        self.where = where
        if not isinstance(value, dict):
            self.fail_at(where or "(top level)", f"must be a mapping, got {_show(value)}")
        for key in value:
            if not isinstance(key, str):
                self.fail_at(self.key_path(str(key)), "keys must be strings")
            unsupported = _UNSUPPORTED_KEYS.get(self.key_path(key))
            if unsupported:
                self.fail(key, unsupported)
            if allowed is not None and key not in allowed:
                self.fail(key, f"unknown key; expected one of: {', '.join(allowed)}")
        self.data: dict[str, object] = value

    def key_path(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def fail_at(self, path: str, problem: str) -> NoReturn:
        raise ConfigError(f"web config {self.source}: {path}: {problem}")

    def fail(self, key: str, problem: str) -> NoReturn:
        self.fail_at(self.key_path(key), problem)

    def get(self, key: str) -> object:
        return self.data.get(key)

    def sub(self, key: str, value: object) -> _Fields | None:
        return None if value is None else _Fields(self.source, self.key_path(key), value, None)

    def boolean(self, key: str, default: bool) -> bool:
        value = self.data.get(key, default)
        if not isinstance(value, bool):
            self.fail(key, f"must be true or false, got {_show(value)}")
        return value

    def string(self, key: str) -> str | None:
        value = self.data.get(key)
        if value is None or value == "":
            return None
        if not isinstance(value, str):
            self.fail(key, f"must be a string, got {_show(value)}")
        return value

    def path(self, key: str, base: Path, *, required: bool = False) -> Path | None:
        value = self.string(key)
        if value is None:
            if required:
                self.fail(key, "is required")
            return None
        return base / Path(value).expanduser()  # an absolute value replaces base

    def tls_version(self, key: str, default: str) -> ssl.TLSVersion:
        value = self.string(key) or default
        if value in _INSECURE_TLS_VERSIONS:
            self.fail(key, f"{value} is not supported (insecure); use TLS12 or TLS13")
        if value not in TLS_VERSIONS:
            self.fail(key, f"must be one of {', '.join(TLS_VERSIONS)}, got {_show(value)}")
        return TLS_VERSIONS[value]

    def string_list(self, key: str, *, choices: Sequence[str] | None = None) -> tuple[str, ...]:
        value = self.data.get(key)
        if value is None:
            return ()
        if not isinstance(value, list):
            self.fail(key, f"must be a list of strings, got {_show(value)}")
        for index, item in enumerate(value):
            if not isinstance(item, str) or not item:
                self.fail(f"{key}[{index}]", f"must be a non-empty string, got {_show(item)}")
            if choices is not None and item not in choices:
                self.fail(f"{key}[{index}]", f"unknown value {_show(item)}; known values: {', '.join(choices)}")
        return tuple(value)


class _StrictLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that rejects a key given twice in one mapping (PyYAML keeps the last silently)."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[object] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            duplicate = key in seen
        except TypeError:  # unhashable key: PyYAML reports it
            continue
        if duplicate:
            raise yaml.constructor.ConstructorError(
                None, None, f"key {_show(key)} is given twice in one mapping", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node, deep=True)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _show(value: object) -> str:
    text = f"{value!r} (a boolean)" if isinstance(value, bool) else repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _read_text(config: TLSServerConfig, key: str, path: Path) -> str:
    try:
        return path.read_text(encoding="ascii", errors="replace")
    except OSError as exc:
        config._fail(key, f"cannot read {path}: {_os_problem(exc)}")


def _os_problem(exc: Exception) -> str:
    return exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)


def _ssl_problem(exc: Exception) -> str:
    if isinstance(exc, ssl.SSLError) and exc.reason:
        return f"{exc.library or 'SSL'}: {exc.reason}"
    return str(exc)


def _normalize_san(kind: str, value: str) -> str:
    if kind == "IP Address":
        try:
            return str(ipaddress.ip_address(value.strip()))
        except ValueError:
            return value
    return value


def _normalize_san_any(value: str) -> str:
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        return value
