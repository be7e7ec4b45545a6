"""Who may ask what, and how often: basic auth (bcrypt) as exporter-toolkit checks it, the paths it excludes,
the rate limit, and the headers added to every answer; ``AccessRules`` holds them for one web config and
the server (``web/server.py``) applies them to each request.

``rate_limit`` of the web config is one token bucket for every request, as exporter-toolkit's (Go's
``rate.NewLimiter(rate.Every(interval), burst)``): ``burst`` requests at once, then one per ``interval``;
``/-/traffic``, a load balancer's probe, is neither rate-limited nor asked for a password.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import logging
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from se_exporter.config.values import TRAFFIC_PATH
from se_exporter.web.config import WebConfig
from se_exporter.web.endpoints import HTTPAnswer

log = logging.getLogger(__name__)

REALM = "se-exporter"

_AUTH_CACHE_SIZE = 256

MAX_AUTH_WAITING = 4
_BCRYPT_MAX_PASSWORD = 72  # bcrypt uses the first 72 bytes, as htpasswd and Go's bcrypt do


class BasicAuthenticator:
    """Checks ``Authorization: Basic`` against bcrypt hashes, as exporter-toolkit does, with two hardenings.

    - Only successful checks are cached, keyed by an HMAC (per-process random key) of user, hash and
      password: no plaintext password is kept, and failed guesses cannot evict good entries, so a
      scraper with valid credentials pays bcrypt once, not on every scrape.
    - An unknown user is checked against a dummy hash of the users' usual cost (the most common one),
      so the answer takes as long as for a known user with a wrong password (no user enumeration by
      timing; exact when all users share a cost, as ``htpasswd -B`` hashes do).

    ``authenticate`` runs bcrypt; the server calls it on ``Authentication``'s one thread.
    """

    challenge = ("WWW-Authenticate", f'Basic realm="{REALM}"')  # the header of every 401

    def __init__(self, users: Mapping[str, str], cache_size: int = _AUTH_CACHE_SIZE) -> None:
        if not users:
            raise ValueError("BasicAuthenticator needs at least one user")
        import bcrypt  # only needed, and only imported, when basic auth is configured

        self._bcrypt = bcrypt
        self._users = {user.encode(): hashed.encode() for user, hashed in users.items()}
        costs = [int(hashed[4:6]) for hashed in users.values()]
        cost = max(set(costs), key=lambda c: (costs.count(c), c))  # the usual one: most users' answers match it
        self._dummy = bcrypt.hashpw(secrets.token_urlsafe(32).encode(), bcrypt.gensalt(rounds=cost))
        self._cache_key = secrets.token_bytes(32)
        self._cache: OrderedDict[bytes, None] = OrderedDict()
        self._cache_size = cache_size
        self._cache_lock = threading.Lock()

    def authenticate(self, authorization: str | None) -> str | None:
        """The user name if the ``Authorization`` header value holds valid credentials, else None (may run
        bcrypt: tens of milliseconds)."""
        credentials = _parse_basic(authorization)
        if credentials is None:
            return None
        user, password = credentials
        return user.decode("utf-8", "replace") if self.check(user, password) else None

    def cached_user(self, authorization: str | None) -> str | None:
        """Without bcrypt: the user name when these exact credentials were checked valid before, else None
        (``authenticate`` tells, unless ``well_formed`` says there is nothing to check)."""
        credentials = _parse_basic(authorization)
        hashed = self._users.get(credentials[0]) if credentials is not None else None
        if credentials is None or hashed is None:
            return None
        user, password = credentials
        with self._cache_lock:
            if self._key(user, hashed, password) in self._cache:
                return user.decode("utf-8", "replace")
        return None

    @staticmethod
    def well_formed(authorization: str | None) -> bool:
        """Whether the header holds Basic credentials at all (if not, no bcrypt is needed to refuse them)."""
        return _parse_basic(authorization) is not None

    def check(self, user: bytes, password: bytes) -> bool:
        hashed = self._users.get(user)
        known = hashed is not None
        if hashed is None:
            hashed = self._dummy
        key = self._key(user, hashed, password)
        if known:
            with self._cache_lock:
                if key in self._cache:
                    self._cache.move_to_end(key)
                    return True
        try:  # on Authentication's one thread: bcrypt runs one check at a time
            ok = self._bcrypt.checkpw(password[:_BCRYPT_MAX_PASSWORD], hashed)
        except ValueError:
            ok = False
        if not (ok and known):
            return False
        with self._cache_lock:
            self._cache[key] = None
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return True

    def _key(self, *parts: bytes) -> bytes:
        mac = hmac.new(self._cache_key, digestmod=hashlib.sha256)
        for part in parts:  # length-prefixed: no two (user, hash, password) triples share a message
            mac.update(len(part).to_bytes(8, "big"))
            mac.update(part)
        return mac.digest()


def _parse_basic(authorization: str | None) -> tuple[bytes, bytes] | None:
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(token.strip().encode("latin-1"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        return None
    user, colon, password = decoded.partition(b":")
    return (user, password) if colon else None


class TokenBucket:
    """``allow()`` takes a token if one is there; tokens come back one per ``interval`` seconds, at most
    ``burst`` of them. Safe from any thread."""

    def __init__(self, interval: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        self._interval, self._burst, self._clock = interval, burst, clock
        self._tokens = float(burst)
        self._at = clock()
        self._lock = threading.Lock()

    def allow(self) -> bool:
        with self._lock:
            now = self._clock()
            self._tokens = min(float(self._burst), self._tokens + max(0.0, now - self._at) / self._interval)
            self._at = now
            if self._tokens < 1:
                return False
            self._tokens -= 1
            return True


@dataclass(frozen=True, slots=True)
class AccessRules:
    """What one web config says of requests: who may ask, what is added to every answer, how often."""

    config: WebConfig
    auth: BasicAuthenticator | None
    excluded: frozenset[str]
    extra: tuple[tuple[str, str], ...]
    limit: TokenBucket | None

    @classmethod
    def of(cls, config: WebConfig, before: AccessRules | None) -> AccessRules:
        """The rules of ``config``; the authenticator (its cache) and the bucket of ``before`` are kept while
        the users and the rate limit are the same."""
        users_kept = before is not None and before.config.basic_auth_users == config.basic_auth_users
        limit_kept = before is not None and before.config.rate_limit == config.rate_limit
        return cls(
            config,
            before.auth if before is not None and users_kept else _authenticator(config),
            config.auth_excluded_paths | {TRAFFIC_PATH},  # a load balancer's probe sends no password
            config.headers,
            before.limit if before is not None and limit_kept else _bucket(config),
        )

    def with_extra(self, answer: HTTPAnswer) -> HTTPAnswer:
        present = {name.lower() for name, _ in answer.headers}  # the application's own headers win, as in Go
        extra = [header for header in self.extra if header[0].lower() not in present]
        return HTTPAnswer(answer.status, answer.reason, answer.headers + extra, answer.body) if extra else answer


def _authenticator(config: WebConfig) -> BasicAuthenticator | None:
    return BasicAuthenticator(config.basic_auth_users) if config.basic_auth_users else None


def _bucket(config: WebConfig) -> TokenBucket | None:
    return TokenBucket(*config.rate_limit) if config.rate_limit else None


class Authentication:
    """The server's basic-auth checks: credentials checked valid before pass at once; others need bcrypt
    (tens of milliseconds) on one thread, so a flood of wrong passwords uses at most one core, requests with
    the same credentials share one check, and at most ``MAX_AUTH_WAITING`` distinct ones wait: beyond, 429,
    never delaying a scrape whose credentials are known."""

    def __init__(self) -> None:
        self._bcrypt = ThreadPoolExecutor(max_workers=1, thread_name_prefix="web-auth")
        self._checking: dict[str, asyncio.Future[str | None]] = {}  # credentials in bcrypt, by header

    def close(self) -> None:
        self._bcrypt.shutdown(wait=False, cancel_futures=True)

    async def refusal(self, auth: BasicAuthenticator, environ: dict[str, Any]) -> HTTPAnswer | None:
        """None when the request may go on (``REMOTE_USER`` set), else the refusal (401, or 429 while
        ``MAX_AUTH_WAITING`` distinct credentials wait for bcrypt)."""
        header = environ.get("HTTP_AUTHORIZATION")
        user = auth.cached_user(header)
        if user is None and header is not None and auth.well_formed(header):
            checking = self._checking.get(header)  # the same credentials already in bcrypt: share the check
            if checking is None:
                if len(self._checking) >= MAX_AUTH_WAITING:
                    log.debug("too many authentication attempts at once", extra={"client": environ["REMOTE_ADDR"]})
                    return HTTPAnswer(
                        429, "Too Many Requests", [("Retry-After", "1")], b"Too many authentication attempts\n"
                    )
                loop = asyncio.get_running_loop()
                checking = self._checking[header] = loop.run_in_executor(self._bcrypt, auth.authenticate, header)
                checking.add_done_callback(lambda _: self._checking.pop(header, None))
            user = await asyncio.shield(checking)
        if user is None:
            log.debug("unauthorized request", extra={"client": environ["REMOTE_ADDR"]})
            return HTTPAnswer(401, "Unauthorized", [auth.challenge], b"Unauthorized\n")
        environ["REMOTE_USER"] = user
        return None
