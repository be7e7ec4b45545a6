"""The life of the process: a stop request from the first moment, then start, run, close cleanly.

A stop is requested the platform's way (``platform.current().stop_signals``): SIGTERM, SIGINT or SIGHUP
on POSIX (a closed terminal is a clean stop too; nothing reloads on SIGHUP); CTRL+C (which a WinSW
service stop sends) or CTRL+BREAK on Windows. ``StopRequest.install`` is the first thing a command
does, so a signal that arrives while the exporter is still starting (reading its state file, asking
IMDS who this VM is) is a clean stop, not the signal's default death.

The signal handler itself does nothing: Python runs it on the main thread between two bytecodes, where
that thread may hold any lock, a ``threading.Event``'s own among them (``Event.set`` there deadlocked
a stop inside the poll loop's ``Event.wait``). The interpreter's C handler writes the signal's number
to a socket (``signal.set_wakeup_fd``), and the stopping thread, which reads that socket, sets ``event``.
Every wait ends on ``event``: the poll loop's pause at once, a request to IMDS within
``imds/client.py``'s ``STOP_CHECK_SECONDS``, so a stop takes seconds whatever IMDS does.
"""

from __future__ import annotations

import logging
import signal
import socket
import threading
from collections.abc import Callable
from types import FrameType

log = logging.getLogger("se_exporter")

_FINISHED = 0  # a byte no signal has: written by ``restore`` to end the stopping thread


class StopRequest:
    """``event`` is set by the stopping thread once a stop signal arrived (``signal_name`` says which)."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.signal_name = ""
        self._previous: dict[int, object] = {}
        self._previous_wakeup = -1
        self._wakeup: tuple[socket.socket, socket.socket] | None = None
        self._stopping: threading.Thread | None = None

    def install(self, signals: tuple[int, ...]) -> StopRequest:
        """Catch ``signals`` (from the main thread, as Python requires) and start the stopping thread."""
        reader, writer = socket.socketpair()
        writer.setblocking(False)  # set_wakeup_fd's requirement: a full buffer must never block a handler
        self._wakeup = (reader, writer)
        self._previous_wakeup = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
        for sig in signals:
            self._previous[sig] = signal.signal(sig, _on_signal)
        self._stopping = threading.Thread(target=self._stop_on_signal, args=(reader,), name="stop", daemon=True)
        self._stopping.start()
        return self

    def restore(self) -> None:
        """Give the signals back their earlier handlers and end the stopping thread."""
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]  # what signal.signal returned
        self._previous.clear()
        if self._wakeup is None:
            return
        signal.set_wakeup_fd(self._previous_wakeup)
        reader, writer = self._wakeup
        self._wakeup = None
        writer.setblocking(True)
        writer.send(bytes([_FINISHED]))
        if self._stopping is not None:
            self._stopping.join()
        reader.close()
        writer.close()

    def _stop_on_signal(self, reader: socket.socket) -> None:
        while received := reader.recv(64):
            for signum in received:
                if signum == _FINISHED:
                    return
                # The interpreter writes here every signal that has a Python handler, not only ours.
                if signum in self._previous and not self.event.is_set():
                    self.signal_name = _name(signum)
                    log.info("received %s, shutting down", self.signal_name)
                    self.event.set()


def _on_signal(_signum: int, _frame: FrameType | None) -> None:
    """Nothing: the C handler has already written the signal to the stopping thread's socket."""


def _name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def serve(
    stop: StopRequest,
    start: Callable[[], None],
    run: Callable[[threading.Event], None],
    close: Callable[[], None],
) -> int:
    """Run until a stop is requested (perhaps already), then shut down cleanly and exit 0."""
    try:
        if stop.event.is_set():  # while asking IMDS who this VM is, or reading the state file
            log.info("stopped during start-up")
        else:
            start()
            run(stop.event)
    finally:
        close()
        stop.restore()
    return 0
