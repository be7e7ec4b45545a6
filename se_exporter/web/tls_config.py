"""``tls_server_config`` of the web config: its schema, and ``TLSServerConfig`` which builds the SSL context.

See ``se_exporter.web.config`` for the supported subset and where it differs from exporter-toolkit.
"""

from __future__ import annotations

import logging
import ssl
from pathlib import Path

import msgspec

from se_exporter.config.files import show
from se_exporter.config.schema import field_problem
from se_exporter.web.tls_context import CIPHER_SUITES, TLSServerConfig, normalize_ip

log = logging.getLogger(__name__)

CLIENT_AUTH_TYPES = ("NoClientCert", "VerifyClientCertIfGiven", "RequireAndVerifyClientCert")
_UNSUPPORTED_CLIENT_AUTH = ("RequestClientCert", "RequireAnyClientCert", "RequireClientCert")
TLS_VERSIONS = {"TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3}
_INSECURE_TLS_VERSIONS = ("TLS10", "TLS11")

CURVES = ("CurveP256", "CurveP384", "CurveP521", "X25519")

# Inline PEM beside a file: exporter-toolkit reads the file; so does se-exporter, saying the text is unused.
_INLINE_TWINS = (("cert", "cert_file"), ("key", "key_file"), ("client_ca", "client_ca_file"))


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
        if _version("min_version", self.min_version, "TLS12") > _version("max_version", self.max_version, "TLS13"):
            raise field_problem("min_version", "is greater than max_version")

    @property
    def empty(self) -> bool:
        """``tls_server_config: {}``: nothing set."""
        return all(
            getattr(self, name) == default
            for name, default in zip(self.__struct_fields__, self.__struct_defaults__, strict=True)
        )

    def _check_client_auth(self) -> None:
        auth = self.client_auth_type or "NoClientCert"
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
    auth = spec.client_auth_type or "NoClientCert"
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
        client_auth_type=spec.client_auth_type or "NoClientCert",
        client_ca_file=_resolve(base, spec.client_ca_file) if spec.client_ca_file else None,
        client_allowed_sans=tuple(normalize_ip(san) for san in spec.client_allowed_sans),  # once, not per handshake
        min_version=_version("min_version", spec.min_version, "TLS12"),
        max_version=_version("max_version", spec.max_version, "TLS13"),
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
            raise field_problem(f"{key}[{index}]", f"unknown value {show(value)}; known values: {', '.join(known)}")
