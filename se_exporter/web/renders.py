"""Renders of /metrics: on one thread, shared, bounded in number, dropped when nobody waits.

A render of /metrics with a thousand events listed takes a tenth of a second of CPU, so they run on one
thread of their own, and everything else the server answers (the probes, the landing page) never waits
behind them. A render is shared by every request that would get the same answer: the same path, the same
format (after content negotiation), gzip or not, the same ``name[]`` filters; any other query parameter
changes nothing and is not part of it (``GET /metrics?x=1``, ``?x=2``… each rendered in full once made a
flood of distinct scrapes starve the probes: a liveness probe took over 30 s). At most ``MAX_RENDERS``
distinct renders are pending; one more is answered 503 with ``Retry-After``. A render whose clients have
all gone is dropped before it starts (or its result discarded). A finished render is shared with the
requests that come after it while the snapshot is the same, for ``SHARE_SECONDS`` at most.
"""

from __future__ import annotations

import asyncio
import logging
import urllib.parse
from collections.abc import Callable, Hashable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any
from wsgiref.types import WSGIApplication

from prometheus_client.exposition import choose_encoder, gzip_accepted

from se_exporter.web.endpoints import HTTPAnswer, call_app

log = logging.getLogger(__name__)
MAX_RENDERS = 4  # distinct renders queued or running; a scrape beyond is told to come back
# A finished render answers the same requests while the snapshot is the same (until the next poll), for at
# most this long: HA pairs of Prometheus scraping together, or a flood of clients that never read their
# answer, share one body instead of holding one each; the "seconds until" gauges and process_* are at most
# this much older than the scrape, and the gauges follow IMDS within a poll.
SHARE_SECONDS = 1.0
GONE_CHECK_SECONDS = 0.1  # how often a waiting request looks whether its client is still there
BUSY = HTTPAnswer(
    503,
    "Service Unavailable",
    [("Content-Type", "text/plain; charset=utf-8"), ("Retry-After", "1")],
    b"Too many different scrapes at once: try again\n",
)
RenderKey = Callable[[dict[str, Any]], Hashable]


class ClientGone(Exception):
    """The client closed its connection while its answer was being rendered."""


def metrics_key(environ: dict[str, Any]) -> Hashable:
    """What changes a /metrics answer: the format prometheus_client will choose, gzip, ``name[]``."""
    _, content_type = choose_encoder(environ.get("HTTP_ACCEPT", ""))
    names = urllib.parse.parse_qs(environ.get("QUERY_STRING", "")).get("name[]", [])
    zipped = gzip_accepted(environ.get("HTTP_ACCEPT_ENCODING", ""))
    return environ.get("PATH_INFO"), content_type, zipped, tuple(sorted(set(names)))


class _Render:
    def __init__(self, future: asyncio.Future[HTTPAnswer]) -> None:
        self.future = future
        self.waiting = 0


@dataclass(frozen=True, slots=True)
class _Done:
    answer: HTTPAnswer
    expires: float  # the loop's time
    snapshot: object  # held, so that its id in the key is not reused by another while this is kept


class Renders:
    """``paths`` rendered on the render thread, shared by ``key``; the rest answered at once."""

    def __init__(
        self, paths: frozenset[str], key: RenderKey = metrics_key, snapshot: Callable[[], object] | None = None
    ) -> None:
        self.paths = paths
        self._key = key
        # What the answer is made of, replaced whole when it changes (each poll); None: not known, so a
        # finished render is never shared, only one in progress.
        self._snapshot = snapshot
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="web-render")
        self._pending: dict[Hashable, _Render] = {}
        self._done: dict[Hashable, _Done] = {}  # finished renders, shared until they expire

    def close(self) -> None:
        self._thread.shutdown(wait=False, cancel_futures=True)

    async def answer(self, app: WSGIApplication, environ: dict[str, Any], gone: Callable[[], bool]) -> HTTPAnswer:
        """The answer to a render path's request, shared; ``ClientGone`` if ``gone()`` turns true first."""
        snapshot = self._snapshot() if self._snapshot is not None else None
        key = (self._key(environ), id(snapshot))  # an id is unique while its object lives: _done holds it
        now = asyncio.get_running_loop().time()
        self._done = {kept: done for kept, done in self._done.items() if done.expires > now}
        if (shared := self._done.get(key)) is not None:
            return shared.answer
        render = self._pending.get(key)
        if render is None:
            if len(self._pending) >= MAX_RENDERS:
                return BUSY
            render = self._start(key, snapshot, app, environ)
        render.waiting += 1
        try:
            while True:
                done, _ = await asyncio.wait({render.future}, timeout=GONE_CHECK_SECONDS)
                if done:
                    return render.future.result()
                if gone():
                    raise ClientGone
        finally:
            render.waiting -= 1
            if render.waiting == 0 and not render.future.done():
                render.future.cancel()  # not started: dropped; running: its result is not kept

    def _start(self, key: Hashable, snapshot: object, app: WSGIApplication, environ: dict[str, Any]) -> _Render:
        log.debug("render queued", extra={"pending": len(self._pending) + 1})
        future = asyncio.get_running_loop().run_in_executor(self._thread, call_app, app, environ)
        render = self._pending[key] = _Render(future)

        def forget(finished: asyncio.Future[HTTPAnswer]) -> None:
            if self._pending.get(key) is render:
                del self._pending[key]
            if self._snapshot is not None and not finished.cancelled() and finished.exception() is None:
                self._done.pop(key, None)  # re-inserted last: the oldest stay first
                expires = finished.get_loop().time() + SHARE_SECONDS
                self._done[key] = _Done(finished.result(), expires, snapshot)
                while len(self._done) > MAX_RENDERS:  # the oldest first: dicts keep their order
                    del self._done[next(iter(self._done))]

        future.add_done_callback(forget)
        return render
