"""The life of the process: start, run until a stop is requested, close cleanly.

A stop is requested the platform's way (``platform.current().stop_signals``): SIGTERM or SIGINT on
POSIX; CTRL+C (which a WinSW service stop sends) or CTRL+BREAK on Windows.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable

from se_exporter.platform import current

log = logging.getLogger("se_exporter")


def serve(start: Callable[[], None], run: Callable[[threading.Event], None], close: Callable[[], None],
          stop_signals: tuple[int, ...] | None = None) -> int:
    """Run until a stop is requested, then shut down cleanly and exit 0."""
    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        log.info("received %s, shutting down", signal.Signals(signum).name)
        stop.set()

    signals = current().stop_signals if stop_signals is None else stop_signals
    previous = {sig: signal.signal(sig, on_signal) for sig in signals}
    try:
        start()
        run(stop)
    finally:
        close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0
