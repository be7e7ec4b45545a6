"""Basic auth (bcrypt), as exporter-toolkit checks it; the web server (``web/exchange.py``) applies it."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import secrets
import threading
from collections import OrderedDict
from collections.abc import Mapping

log = logging.getLogger(__name__)

REALM = "se-exporter"
_AUTH_CACHE_SIZE = 256
_BCRYPT_MAX_PASSWORD = 72  # bcrypt uses the first 72 bytes, as htpasswd and Go's bcrypt do


class BasicAuthenticator:
    """Checks ``Authorization: Basic`` against bcrypt hashes, as exporter-toolkit does, with two hardenings.

    - Only successful checks are cached, keyed by an HMAC (per-process random key) of user, hash and
      password: no plaintext password is kept, and failed guesses cannot evict good entries, so a
      scraper with valid credentials pays bcrypt once, not on every scrape.
    - An unknown user is checked against a dummy hash of the users' usual cost (the most common one),
      so the answer takes as long as for a known user with a wrong password (no user enumeration by
      timing; exact when all users share a cost, as ``htpasswd -B`` hashes do).

    bcrypt runs one at a time (a lock), so a flood of wrong passwords uses at most one CPU core.
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
        self._bcrypt_lock = threading.Lock()

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
