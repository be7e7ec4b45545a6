"""The life of the process: start, run until a stop is requested, close cleanly.

A stop is requested the platform's way (``platform.current().stop_signals``): SIGTERM or SIGINT on
POSIX; CTRL+C (which a WinSW service stop sends) or CTRL+BREAK on Windows. Polling stops at the
next pause; if the poll loop is waiting on IMDS at that moment (which may take minutes: the first call
after enabling, or a peer that drips its answer), the wait is cut short, so a stop takes seconds
whatever IMDS does.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable

from se_exporter.platform import current

log = logging.getLogger("se_exporter")


class StopNow(BaseException):
    """Raised by the stop handler inside a wait that ``interruptible`` says may be cut short."""


def serve(start: Callable[[], None], run: Callable[[threading.Event], None], close: Callable[[], None],
          stop_signals: tuple[int, ...] | None = None, interruptible: Callable[[], bool] = lambda: False) -> int:
    """Run until a stop is requested, then shut down cleanly and exit 0.

    ``interruptible()`` is asked in the signal handler (on the thread that runs ``run``): True means that
    thread only waits on the network, where raising ``StopNow`` loses nothing.
    """
    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        log.info("received %s, shutting down", signal.Signals(signum).name)
        stop.set()
        if interruptible():
            raise StopNow

    signals = current().stop_signals if stop_signals is None else stop_signals
    previous = {sig: signal.signal(sig, on_signal) for sig in signals}
    try:
        start()
        run(stop)
    except StopNow:
        log.info("stopped while waiting on IMDS")
    finally:
        close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0
