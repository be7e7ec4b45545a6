"""The life of the process: a stop request from the first moment, then start, run, close cleanly.

A stop is requested the platform's way (``platform.current().stop_signals``): SIGTERM, SIGINT or SIGHUP
on POSIX (a closed terminal is a clean stop too; nothing reloads on SIGHUP); CTRL+C (which a WinSW
service stop sends) or CTRL+BREAK on Windows. ``StopRequest.install`` is the first thing a command
does, so a signal that arrives while the exporter is still starting (reading its state file, asking
IMDS who this VM is) is a clean stop, not the signal's default death. Polling stops at the next pause;
if the thread is waiting on IMDS at that moment (which may take minutes: the first call after enabling,
or a peer that drips its answer), the wait is cut short, so a stop takes seconds whatever IMDS does.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Callable, Iterator
from types import FrameType

log = logging.getLogger("se_exporter")


class StopNow(BaseException):
    """Raised by the stop handler inside a wait that ``StopRequest.interruptible`` says may be cut short."""


class StopRequest:
    """A stop signal sets ``event``; while ``interruptible()`` is True it also raises ``StopNow`` on the
    thread that received it (the main thread), which then only waits on the network."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.signal_name = ""
        self._interruptible: Callable[[], bool] = lambda: False
        self._previous: dict[int, object] = {}

    def install(self, signals: tuple[int, ...]) -> StopRequest:
        for sig in signals:
            self._previous[sig] = signal.signal(sig, self._on_signal)
        return self

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]  # what signal.signal returned
        self._previous.clear()

    @contextlib.contextmanager
    def interruptible(self, waiting: Callable[[], bool]) -> Iterator[None]:
        """Within the block, a stop raises ``StopNow`` while ``waiting()`` is True (and at once if a stop
        came before the block)."""
        if self.event.is_set() and waiting():
            raise StopNow
        self._interruptible = waiting
        try:
            yield
        finally:
            self._interruptible = lambda: False

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        self.signal_name = signal.Signals(signum).name
        log.info("received %s, shutting down", self.signal_name)
        self.event.set()
        if self._interruptible():
            raise StopNow


def serve(
    stop: StopRequest,
    start: Callable[[], None],
    run: Callable[[threading.Event], None],
    close: Callable[[], None],
    waiting: Callable[[], bool] = lambda: False,
) -> int:
    """Run until a stop is requested (perhaps already), then shut down cleanly and exit 0.

    ``waiting()`` is asked in the signal handler (on the thread that runs ``run``): True means that
    thread only waits on the network, where raising ``StopNow`` loses nothing.
    """
    try:
        with stop.interruptible(waiting):
            if not stop.event.is_set():
                start()
                run(stop.event)
    except StopNow:
        log.info("stopped while waiting on IMDS")
    finally:
        close()
        stop.restore()
    return 0
