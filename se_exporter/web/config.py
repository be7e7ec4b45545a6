"""The web configuration file (``--web.config.file``): TLS, basic auth, response headers and the rate limit.

The format is the Prometheus exporter-toolkit one
(https://github.com/prometheus/exporter-toolkit/blob/master/docs/web-configuration.md), so a file
written for node_exporter works here. The subset taken, and where se-exporter differs (every difference
fails closed: a setting Python's ``ssl`` cannot honour is refused, never weakened), are in SECURITY.md,
*TLS and authentication*. ``load_web_config`` validates the file completely at start-up: every problem is a
``ConfigError`` of the form ``web config <file>: <key path>: <problem>``, and the certificates and keys are
loaded once so that a broken one stops the exporter before it listens.

``LiveWebConfig`` is the web config in force: ``--web.config.file`` re-read whole when it changes, as
exporter-toolkit reads it for every request (users, auth types, TLS settings, headers, rate limit).
``current()`` stats the file at most once per ``check_every`` seconds (on the requests and connections that
ask); when it changed, it is parsed and checked again. A file that no longer parses is said once in the log
and puts nothing in force: ``current()`` is None until the file is mended, and the server fails closed, as
exporter-toolkit does (the last good config is never kept for auth). So is a change that would switch TLS on
or off, which the listening socket cannot follow without a restart. ``reload_successful`` is the gauge
``azure_scheduled_events_web_config_last_reload_successful``.

The same look, on the same timer, follows the TLS context (``tls_context()``): a changed
``tls_server_config`` or certificate, key or client CA file rebuilds it, and a broken new set is logged and the
previous context kept, so a half-written renewal never takes the port down. While the file does not parse,
handshakes go on with the last context (every request is then refused, ``web/server.py``).
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from se_exporter.common.files import FileStamp, read_text, stamp
from se_exporter.config.flags import duration
from se_exporter.config.schema import decode, field_problem
from se_exporter.errors import ConfigError, show
from se_exporter.web.tls import TLSServerConfig, TLSServerSpec, tls_config

log = logging.getLogger(__name__)

KIND = "web config"


# exporter-toolkit's extraHTTPHeaders: the only headers that may be configured, and, for some, the
# only values. Kept identical on purpose (consistency across the Prometheus ecosystem).
ALLOWED_HEADERS: Mapping[str, tuple[str, ...] | None] = {
    "Strict-Transport-Security": None,
    "X-Content-Type-Options": ("nosniff",),
    "X-Frame-Options": ("deny", "sameorigin"),
    "X-XSS-Protection": None,
    "Content-Security-Policy": None,
}


_BCRYPT_HASH = re.compile(r"^\$2[aby]\$(\d\d)\$[./A-Za-z0-9]{53}$")

_BCRYPT_COSTS = range(4, 32)

_HEADER_VALUE = re.compile(r"^[\x20-\x7e\t]*$")  # visible ASCII, space and tab: no CR/LF injection


class HTTPServerSpec(msgspec.Struct, forbid_unknown_fields=True):
    http2: bool = True  # accepted for compatibility; HTTP/2 is not served
    headers: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        for name, written in (self.headers or {}).items():
            below = f".{name}"
            if name not in ALLOWED_HEADERS:
                allowed_names = ", ".join(ALLOWED_HEADERS)
                raise field_problem(
                    "headers", f"this HTTP header can not be configured; allowed: {allowed_names}", None, below
                )
            if written is None or written == "":
                continue  # blank means unset, as in exporter-toolkit
            value = self.headers[name] = _scalar_text(written)  # type: ignore[index]
            if not isinstance(value, str) or not _HEADER_VALUE.match(value):
                problem = f"must be a string of printable ASCII characters, got {show(value)}"
                raise field_problem("headers", problem, None, below)
            allowed = ALLOWED_HEADERS[name]
            if allowed is not None and value not in allowed:
                raise field_problem("headers", f"must be one of {', '.join(allowed)}, got {show(value)}", None, below)


class RateLimitSpec(msgspec.Struct, forbid_unknown_fields=True):
    """``rate_limit`` as exporter-toolkit reads it: a Go duration and a burst."""

    interval: str | int = 0
    burst: int = 0

    @property
    def seconds(self) -> float:
        """The interval in seconds (0: no limit); a bare number is Go's nanoseconds."""
        if isinstance(self.interval, int):
            return self.interval / 1e9
        try:
            return duration(self.interval)
        except argparse.ArgumentTypeError:
            raise field_problem(
                "interval", f"must be a duration such as 1s or 250ms, got {show(self.interval)}"
            ) from None

    def __post_init__(self) -> None:
        if self.seconds < 0:
            raise field_problem("interval", f"must not be negative, got {show(self.interval)}")
        if self.seconds > 0 and self.burst < 1:
            raise field_problem("burst", f"must be at least 1, or no request is ever answered; got {self.burst}")


class WebConfigFile(msgspec.Struct, forbid_unknown_fields=True):
    """The file as written (exporter-toolkit's format, the subset described above)."""

    tls_server_config: TLSServerSpec | None = None
    http_server_config: HTTPServerSpec | None = None
    basic_auth_users: dict[str, Any] | None = None  # user -> bcrypt hash; checked here, never shown
    auth_excluded_paths: tuple[str, ...] = ()
    rate_limit: RateLimitSpec | None = None

    def __post_init__(self) -> None:
        for user, hashed in (self.basic_auth_users or {}).items():
            _check_user(user, hashed)
        for index, path in enumerate(self.auth_excluded_paths):
            if not path.startswith("/"):
                raise field_problem("auth_excluded_paths", f"must be a path starting with /, got {show(path)}", index)
        if self.auth_excluded_paths and not self.basic_auth_users:
            raise field_problem(
                "auth_excluded_paths", "is set but basic_auth_users is empty, so nothing is authenticated"
            )


@dataclass(frozen=True, slots=True)
class WebConfig:
    """A validated web configuration file. ``WebConfig()`` is plain HTTP, no auth, no extra headers."""

    tls: TLSServerConfig | None = None
    headers: tuple[tuple[str, str], ...] = ()
    basic_auth_users: Mapping[str, str] = field(default_factory=dict, repr=False)  # user -> bcrypt hash
    auth_excluded_paths: frozenset[str] = frozenset()  # exact paths served without basic auth
    rate_limit: tuple[float, int] | None = None  # (interval in seconds, burst)
    source: str = field(default="<web config>", compare=False)

    @property
    def scheme(self) -> str:
        return "https" if self.tls else "http"


def load_web_config(path: str | os.PathLike[str], *, check_files: bool = True) -> WebConfig:
    """Read, validate and return the web configuration at ``path``; ``ConfigError`` on any problem.
    ``check_files``: load the certificate, key and client CA too (at start; a reload leaves them to
    ``web/tls.py``, which keeps the previous ones when a renewal is broken)."""
    source = str(path)
    text = read_text(f"{KIND} {source}", path)
    config = parse_web_config(text, source=source, base_dir=Path(path).resolve().parent)
    if config.tls and check_files:
        config.tls.ssl_context()  # load the certificate, key and client CA now: fail before listening
    _log_summary(config)
    return config


def parse_web_config(text: str, *, source: str = "<web config>", base_dir: Path | None = None) -> WebConfig:
    """Validate the YAML ``text``; relative paths resolve against ``base_dir`` (default: the cwd).

    Files are not opened here (``load_web_config`` does that, through ``TLSServerConfig.ssl_context``).
    """
    from se_exporter.config.strict_yaml import load_yaml  # PyYAML only when there is a web config

    prefix = f"{KIND} {source}"
    data = load_yaml(prefix, text)
    spec = decode({} if data is None else data, WebConfigFile, prefix=prefix, secret_keys=("basic_auth_users",))
    headers = {} if spec.http_server_config is None else spec.http_server_config.headers or {}
    return WebConfig(
        tls=tls_config(spec.tls_server_config, source, base_dir or Path.cwd()),
        headers=tuple((name, value) for name, value in headers.items() if value),
        basic_auth_users=dict(spec.basic_auth_users or {}),
        auth_excluded_paths=frozenset(spec.auth_excluded_paths),
        rate_limit=(limit.seconds, limit.burst) if (limit := spec.rate_limit) and limit.seconds > 0 else None,
        source=source,
    )


def _scalar_text(value: object) -> object:
    """A YAML scalar as exporter-toolkit reads it into a string (``X-XSS-Protection: 1`` is "1"); a list or a
    mapping stays what it is, and is refused."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return value


def _check_user(user: str, hashed: object) -> None:
    if not user or ":" in user:
        raise field_problem(
            "basic_auth_users",
            "user names must be non-empty and must not contain ':' (basic auth cannot carry it)",
            None,
            f".{user}",
        )
    match = _BCRYPT_HASH.match(hashed) if isinstance(hashed, str) else None
    if match is None or int(match.group(1)) not in _BCRYPT_COSTS:
        # Never echo the value: it may be a plaintext password put there by mistake.
        raise field_problem(
            "basic_auth_users",
            "is not a bcrypt hash (expected $2y$10$ followed by 53 "
            "characters, e.g. from htpasswd -nBC 10 \"\" | tr -d ':\\n'); the value is not shown",
            None,
            f".{user}",
        )


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


CHECK_EVERY_SECONDS = 1.0


class LiveWebConfig:
    """The config loaded at start, then whatever the file says since, and the TLS context; thread-safe."""

    def __init__(
        self,
        path: Path | None,
        loaded: WebConfig,
        *,
        clock: Callable[[], float] = time.monotonic,
        check_every: float = CHECK_EVERY_SECONDS,
    ) -> None:
        """``path``: the file (None: ``loaded`` for ever, as without ``--web.config.file``; its certificate
        files are still followed)."""
        self._path, self._clock, self._check_every = path, clock, check_every
        self._current: WebConfig | None = loaded
        self._tls = loaded.tls  # the settings of the context; TLS on or off is the listening socket's, fixed
        self._stamp = stamp(path) if path is not None else None
        self._tls_stamps = _stamps(loaded.tls.files) if loaded.tls else ()
        self._context = loaded.tls.ssl_context() if loaded.tls else None
        self._checked = clock()
        self._lock = threading.Lock()
        self.problem: str | None = None  # why nothing is in force

    @property
    def reload_successful(self) -> bool:
        return self.problem is None

    def tls_in_force(self) -> TLSServerConfig | None:
        """The ``tls_server_config`` in force (None: plain HTTP, or the file does not parse)."""
        config = self.current()
        return config.tls if config is not None else None

    def tls_context(self) -> ssl.SSLContext | None:
        """The TLS context for a new connection (None: plain HTTP)."""
        self.current()
        return self._context

    def current(self) -> WebConfig | None:
        """The config in force, or None while the file does not parse (requests then fail closed)."""
        with self._lock:
            now = self._clock()
            if now - self._checked >= self._check_every:
                self._checked = now
                if self._path is not None and (now_stamp := stamp(self._path)) != self._stamp:
                    self._stamp = now_stamp
                    self._reload(self._path)
                self._follow_tls()
            return self._current

    def _follow_tls(self) -> None:
        settings = self._current.tls if self._current is not None else None
        if settings is None or self._context is None:
            return  # plain HTTP, or a file that does not parse: the last context stays
        files = _stamps(settings.files)
        if settings == self._tls and files == self._tls_stamps:
            return
        self._tls, self._tls_stamps = settings, files
        try:
            self._context = settings.ssl_context()
        except ConfigError as exc:
            log.error("TLS files changed but cannot be used; keeping the previous certificate", extra={"err": str(exc)})
        else:
            log.info("TLS context reloaded", extra={"cert_file": str(settings.cert_file or "inline")})

    def _reload(self, path: Path) -> None:
        try:
            config = load_web_config(path, check_files=False)  # a broken certificate keeps the previous one
            if (config.tls is not None) != (self._context is not None):
                switch = "on" if config.tls else "off"
                raise ConfigError(f"web config {path}: tls_server_config: switching TLS {switch} needs a restart")
        except ConfigError as error:
            self._current, self.problem = None, str(error)
            log.error("web config changed and cannot be used; every request fails until it is mended: %s", error)
            return
        self._current, self.problem = config, None
        log.info("web config reloaded", extra={"file": str(path)})


def _stamps(files: Iterable[Path]) -> tuple[FileStamp, ...]:
    """What changes when one of ``files`` (a certificate, a key) is rewritten or replaced."""
    return tuple(stamp(path) for path in files)
