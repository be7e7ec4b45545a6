"""The web config in force: ``--web.config.file`` re-read whole when it changes, as exporter-toolkit reads it
for every request (users, auth types, TLS settings, headers, rate limit).

``current()`` stats the file at most once per ``check_every`` seconds (on the requests and connections that
ask); when it changed, it is parsed and checked again. A file that no longer parses is said once in the log
and puts nothing in force: ``current()`` is None until the file is mended, and the server fails closed, as
exporter-toolkit does (the last good config is never kept for auth). So is a change that would switch TLS on
or off, which the listening socket cannot follow without a restart. ``reload_successful`` is the gauge
``azure_scheduled_events_web_config_last_reload_successful``.

Certificate files are not watched here: ``web/tls.py`` rebuilds the TLS context when they change, and keeps
the previous one when a renewal is broken.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from se_exporter.config.files import stamp
from se_exporter.errors import ConfigError
from se_exporter.web.config import WebConfig, load_web_config

log = logging.getLogger(__name__)
CHECK_EVERY_SECONDS = 1.0


class LiveWebConfig:
    """The config loaded at start, then whatever the file says since; thread-safe."""

    def __init__(
        self,
        path: Path | None,
        loaded: WebConfig,
        *,
        clock: Callable[[], float] = time.monotonic,
        check_every: float = CHECK_EVERY_SECONDS,
    ) -> None:
        """``path``: the file (None: ``loaded`` for ever, as without ``--web.config.file``)."""
        self._path, self._clock, self._check_every = path, clock, check_every
        self._current: WebConfig | None = loaded
        self._tls = loaded.tls is not None  # the listening socket's mode, fixed at start
        self._stamp = stamp(path) if path is not None else None
        self._checked = clock()
        self._lock = threading.Lock()
        self.problem: str | None = None  # why nothing is in force

    @property
    def reload_successful(self) -> bool:
        return self.problem is None

    def current(self) -> WebConfig | None:
        """The config in force, or None while the file does not parse (requests then fail closed)."""
        if self._path is None:
            return self._current
        with self._lock:
            now = self._clock()
            if now - self._checked >= self._check_every:
                self._checked = now
                if (now_stamp := stamp(self._path)) != self._stamp:
                    self._stamp = now_stamp
                    self._reload(self._path)
            return self._current

    def _reload(self, path: Path) -> None:
        try:
            config = load_web_config(path, check_files=False)  # a broken certificate keeps the previous one
            if (config.tls is not None) != self._tls:
                switch = "on" if config.tls else "off"
                raise ConfigError(f"web config {path}: tls_server_config: switching TLS {switch} needs a restart")
        except ConfigError as error:
            self._current, self.problem = None, str(error)
            log.error("web config changed and cannot be used; every request fails until it is mended: %s", error)
            return
        self._current, self.problem = config, None
        log.info("web config reloaded", extra={"file": str(path)})
