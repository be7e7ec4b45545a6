"""Basic auth (bcrypt) on every path, and the web config's extra response headers."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import secrets
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from typing import Any
from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

from se_exporter.web.config import WebConfig

log = logging.getLogger(__name__)

REALM = "se-exporter"
_AUTH_CACHE_SIZE = 256
_BCRYPT_MAX_PASSWORD = 72  # bcrypt uses the first 72 bytes, as htpasswd and Go's bcrypt do


class BasicAuthenticator:
    """Checks ``Authorization: Basic`` against bcrypt hashes, as exporter-toolkit does, with two hardenings.

    - Only successful checks are cached, keyed by an HMAC (per-process random key) of user, hash and
      password: no plaintext password is kept, and failed guesses cannot evict good entries, so a
      scraper with valid credentials pays bcrypt once, not on every scrape.
    - An unknown user is checked against a dummy hash of the highest configured cost, so the answer
      takes as long as for a known user with a wrong password (no user enumeration by timing).

    bcrypt runs one at a time (a lock), so a flood of wrong passwords uses at most one CPU core.
    """

    def __init__(self, users: Mapping[str, str], cache_size: int = _AUTH_CACHE_SIZE) -> None:
        if not users:
            raise ValueError("BasicAuthenticator needs at least one user")
        import bcrypt  # only needed, and only imported, when basic auth is configured

        self._bcrypt = bcrypt
        self._users = {user.encode(): hashed.encode() for user, hashed in users.items()}
        cost = max(int(hashed[4:6]) for hashed in users.values())
        self._dummy = bcrypt.hashpw(secrets.token_urlsafe(32).encode(), bcrypt.gensalt(rounds=cost))
        self._cache_key = secrets.token_bytes(32)
        self._cache: OrderedDict[bytes, None] = OrderedDict()
        self._cache_size = cache_size
        self._cache_lock = threading.Lock()
        self._bcrypt_lock = threading.Lock()

    def authenticate(self, authorization: str | None) -> str | None:
        """The user name if the ``Authorization`` header value holds valid credentials, else None."""
        credentials = _parse_basic(authorization)
        if credentials is None:
            return None
        user, password = credentials
        return user.decode("utf-8", "replace") if self.check(user, password) else None

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
        with self._bcrypt_lock:
            try:
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


def protect(app: WSGIApplication, config: WebConfig) -> WSGIApplication:
    """``app`` behind the web configuration's basic auth (every path) and extra response headers."""
    if not config.basic_auth_users and not config.headers:
        return app
    auth = BasicAuthenticator(config.basic_auth_users) if config.basic_auth_users else None
    extra = list(config.headers)
    excluded = config.auth_excluded_paths
    challenge = ("WWW-Authenticate", f'Basic realm="{REALM}"')

    def guarded(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        def start(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Callable[[bytes], object]:
            present = {name.lower() for name, _ in headers}  # the application's own headers win, as in Go
            return start_response(status, headers + [h for h in extra if h[0].lower() not in present], exc_info)

        if auth is not None and environ.get("PATH_INFO") not in excluded:
            user = auth.authenticate(environ.get("HTTP_AUTHORIZATION"))
            if user is None:
                log.debug("unauthorized request", extra={"client": environ.get("REMOTE_ADDR", "")})
                start("401 Unauthorized", [("Content-Type", "text/plain; charset=utf-8"), challenge])
                return [b"Unauthorized\n"]
            environ["REMOTE_USER"] = user
        return app(environ, start)

    return guarded
