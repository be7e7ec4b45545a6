"""One connection's HTTP/1.1 exchanges (h11), each bounded in time, size and work.

A request is read in full, within ``HEAD_TIMEOUT_SECONDS`` of its first byte and at most
``MAX_HEAD_BYTES`` of head (``MAX_BODY_BYTES`` of body, discarded), before anything runs for it, so a
slow or dripping client holds a coroutine, never a worker. Only then:

- basic auth: credentials checked valid before answer at once; others need bcrypt (tens of
  milliseconds) on one thread, requests with the same credentials sharing one check, at most
  ``MAX_AUTH_WAITING`` distinct ones waiting: a flood of wrong passwords is answered 429 and never delays a
  scrape whose credentials are known;
- /metrics is rendered on one thread, shared by the requests that would get the same answer, bounded in
  number (``web/renders.py``); the probes and the landing page are answered at once, never behind it;
- the answer is written within ``WRITE_TIMEOUT_SECONDS``; HEAD gets GET's headers without the body;
  other methods 405.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import sys
import time
import urllib.parse
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any
from wsgiref.types import WSGIApplication

import h11

from se_exporter.config.values import HEALTHY_PATH, TRAFFIC_PATH
from se_exporter.web.auth import BasicAuthenticator
from se_exporter.web.config import WebConfig
from se_exporter.web.live_config import LiveWebConfig
from se_exporter.web.ratelimit import TokenBucket
from se_exporter.web.renders import Renders
from se_exporter.web.wire import (
    IDLE_TIMEOUT_SECONDS,
    MAX_HEAD_BYTES,
    Answer,
    call_app,
    plain,
    read_request,
    write_answer,
)

log = logging.getLogger("se_exporter.web.server")
MAX_AUTH_WAITING = 4
PLAIN_TEXT = ("Content-Type", "text/plain; charset=utf-8")


class Exchange:
    """What the server does with a request: shared by every connection (its threads and bounds too)."""

    def __init__(self, app: WSGIApplication, config: LiveWebConfig, port: int, scheme: str, renders: Renders) -> None:
        self._app = app
        self._config = config
        self._rules = _Rules.of(config.current() or WebConfig(), None)
        self._base = {
            "SERVER_PORT": str(port),
            "wsgi.url_scheme": scheme,
            "wsgi.version": (1, 0),
            "wsgi.errors": sys.stderr,
            "wsgi.multithread": True,
            "wsgi.multiprocess": False,
            "wsgi.run_once": False,
            "SCRIPT_NAME": "",
        }
        self._renders = renders
        self._bcrypt = ThreadPoolExecutor(max_workers=1, thread_name_prefix="web-auth")
        self._checking: dict[str, asyncio.Future[str | None]] = {}  # credentials in bcrypt, by header

    def close(self) -> None:
        self._renders.close()
        self._bcrypt.shutdown(wait=False, cancel_futures=True)

    async def serve(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        client: str,
        idle: Callable[[bool], None],
        deadline: float,
        *,
        refusal: str | None = None,
    ) -> None:
        """Requests until the client, an error or a timeout ends the connection; ``idle(True)`` while it
        waits for a request (such connections are the ones the server may close when it needs room).
        ``refusal``: why this client may have nothing: its first request is answered 403 with it, then closed."""
        http = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
        while True:
            idle(True)
            try:
                request = await read_request(http, reader, deadline)
            except h11.RemoteProtocolError as error:
                await write_answer(http, writer, plain(error.error_status_hint, str(error)), head=False, close=True)
                return
            if request is None:
                return
            idle(False)
            rules = self._rules_now()
            with_extra = rules.with_extra if rules is not None else _as_is
            if refusal is not None:
                forbidden = Answer(403, "Forbidden", [PLAIN_TEXT], f"{refusal}\n".encode())
                await write_answer(http, writer, with_extra(forbidden), head=request.method == b"HEAD", close=True)
                return
            answer = await self._answer(
                request, client, rules, lambda: reader.at_eof() or writer.transport.is_closing()
            )
            await write_answer(http, writer, with_extra(answer), head=request.method == b"HEAD", close=False)
            if http.our_state is not h11.DONE or http.their_state is not h11.DONE:
                return
            http.start_next_cycle()
            deadline = time.monotonic() + IDLE_TIMEOUT_SECONDS

    def _rules_now(self) -> _Rules | None:
        """What the web config in force says of requests (rebuilt when it changed); None: nothing is in force."""
        config = self._config.current()
        if config is None:
            return None
        if config is not self._rules.config:
            self._rules = _Rules.of(config, self._rules)
        return self._rules

    async def _answer(
        self, request: h11.Request, client: str, rules: _Rules | None, gone: Callable[[], bool]
    ) -> Answer:
        if request.method not in (b"GET", b"HEAD"):
            return Answer(405, "Method Not Allowed", [("Allow", "GET, HEAD")], b"Method not allowed: use GET\n")
        environ = self._environ(request, client)
        refused = await self._refused(rules, environ)
        if refused is not None:
            return refused
        if environ["PATH_INFO"] in self._renders.paths:
            return await self._renders.answer(self._app, environ, gone)
        return call_app(self._app, environ)  # the probes and the landing page: at once, never behind a render

    async def _refused(self, rules: _Rules | None, environ: dict[str, Any]) -> Answer | None:
        """Why the web config in force refuses this request (None: it may go on)."""
        path = environ["PATH_INFO"]
        if rules is None:  # the web config does not parse: fail closed, as exporter-toolkit does
            if path in (HEALTHY_PATH, TRAFFIC_PATH):  # but the process is alive, and a probe must not drop it
                return None
            log.debug("request refused: the web config does not parse", extra={"client": environ["REMOTE_ADDR"]})
            return Answer(500, "Internal Server Error", [PLAIN_TEXT], b"Internal Server Error\n")
        if rules.limit is not None and path != TRAFFIC_PATH and not rules.limit.allow():
            return Answer(429, "Too Many Requests", [PLAIN_TEXT], b"Too Many Requests\n")
        if rules.auth is not None and path not in rules.excluded:
            return await self._authenticate(rules.auth, environ)
        return None

    async def _authenticate(self, auth: BasicAuthenticator, environ: dict[str, Any]) -> Answer | None:
        """None when the request may go on (``REMOTE_USER`` set), else the refusal."""
        header = environ.get("HTTP_AUTHORIZATION")
        user = auth.cached_user(header)
        if user is None and header is not None and auth.well_formed(header):
            checking = self._checking.get(header)  # the same credentials already in bcrypt: share the check
            if checking is None:
                if len(self._checking) >= MAX_AUTH_WAITING:
                    log.debug("too many authentication attempts at once", extra={"client": environ["REMOTE_ADDR"]})
                    return Answer(
                        429, "Too Many Requests", [("Retry-After", "1")], b"Too many authentication attempts\n"
                    )
                loop = asyncio.get_running_loop()
                checking = self._checking[header] = loop.run_in_executor(self._bcrypt, auth.authenticate, header)
                checking.add_done_callback(lambda _: self._checking.pop(header, None))
            user = await asyncio.shield(checking)
        if user is None:
            log.debug("unauthorized request", extra={"client": environ["REMOTE_ADDR"]})
            return Answer(401, "Unauthorized", [auth.challenge], b"Unauthorized\n")
        environ["REMOTE_USER"] = user
        return None

    def _environ(self, request: h11.Request, client: str) -> dict[str, Any]:
        target = request.target.decode("latin-1")
        path, _, query = target.partition("?")
        environ: dict[str, Any] = {
            **self._base,
            "REQUEST_METHOD": "GET",
            "QUERY_STRING": query,
            "PATH_INFO": urllib.parse.unquote(path, "latin-1"),
            "SERVER_NAME": "se-exporter",
            "SERVER_PROTOCOL": f"HTTP/{request.http_version.decode()}",
            "REMOTE_ADDR": client,
            "wsgi.input": io.BytesIO(b""),
        }
        for name, value in request.headers:
            key = "HTTP_" + name.decode("latin-1").upper().replace("-", "_")
            text = value.decode("latin-1")
            environ[key] = f"{environ[key]},{text}" if key in environ else text
        return environ


@dataclass(frozen=True, slots=True)
class _Rules:
    """What one web config says of requests: who may ask, what is added to every answer, how often."""

    config: WebConfig
    auth: BasicAuthenticator | None
    excluded: frozenset[str]
    extra: tuple[tuple[str, str], ...]
    limit: TokenBucket | None

    @classmethod
    def of(cls, config: WebConfig, before: _Rules | None) -> _Rules:
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

    def with_extra(self, answer: Answer) -> Answer:
        present = {name.lower() for name, _ in answer.headers}  # the application's own headers win, as in Go
        extra = [header for header in self.extra if header[0].lower() not in present]
        return Answer(answer.status, answer.reason, answer.headers + extra, answer.body) if extra else answer


def _as_is(answer: Answer) -> Answer:
    return answer


def _authenticator(config: WebConfig) -> BasicAuthenticator | None:
    return BasicAuthenticator(config.basic_auth_users) if config.basic_auth_users else None


def _bucket(config: WebConfig) -> TokenBucket | None:
    return TokenBucket(*config.rate_limit) if config.rate_limit else None


def close_quietly(writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(Exception):
        writer.close()
