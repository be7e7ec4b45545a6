"""The life of the process: start, run until a stop is requested (SIGTERM, SIGINT), close cleanly."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable

log = logging.getLogger("se_exporter")


def serve(start: Callable[[], None], run: Callable[[threading.Event], None], close: Callable[[], None]) -> int:
    """Run until SIGTERM/SIGINT, then shut down cleanly and exit 0."""
    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        log.info("received %s, shutting down", signal.Signals(signum).name)
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        start()
        run(stop)
    finally:
        close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0
