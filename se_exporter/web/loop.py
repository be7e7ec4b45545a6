"""A selectors loop on one thread that drives each connection as a generator: the connection's code reads
top to bottom, and where it would block it yields a ``Wait`` (a socket ready to read or write, or a
worker's future) with the deadline by which it must be met.

Not asyncio: importing asyncio imports ``ssl``, and with it OpenSSL's libraries (about 6 MiB resident,
BENCHMARKS.md), which a plain-HTTP exporter never uses. A missed deadline is thrown into the generator
as ``Timeout``; ``cancel`` closes it (its ``finally`` blocks run). A generator that raises anything else
is logged and dropped: one connection's trouble never reaches the loop.
"""

from __future__ import annotations

import contextlib
import logging
import selectors
import socket
import time
from collections import deque
from collections.abc import Callable, Generator
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("se_exporter.web.server")
READ = selectors.EVENT_READ
WRITE = selectors.EVENT_WRITE


class Timeout(Exception):
    """The client took longer than it may (a slow or dripping client)."""


@dataclass(frozen=True, slots=True)
class Wait:
    """What a connection waits for: ``sock`` ready for ``events``, or ``future`` done (its result is sent
    in); ``deadline`` (monotonic) None for no bound."""

    deadline: float | None
    sock: socket.socket | None = None
    events: int = READ
    future: Future[Any] | None = None


Step = Generator[Wait, Any, None]


class Loop:
    """The loop; every method but ``post`` (and ``stop``) runs on the loop's thread."""

    def __init__(self) -> None:
        self._selector = selectors.DefaultSelector()
        self._wake_reader, self._wake_writer = socket.socketpair()
        self._wake_reader.setblocking(False)
        self._wake_writer.setblocking(False)
        self._selector.register(self._wake_reader, READ, self._drain_wakes)
        self._posted: deque[Callable[[], None]] = deque()
        self._waiting: dict[Step, Wait | None] = {}  # every live task and what it waits for
        self._timers: list[tuple[float, Callable[[], None]]] = []
        self._stopping = False

    def post(self, call: Callable[[], None]) -> None:
        """Run ``call`` on the loop's thread soon (safe from any thread)."""
        self._posted.append(call)
        with contextlib.suppress(OSError):  # full: a wake-up is already pending
            self._wake_writer.send(b"\0")

    def stop(self) -> None:
        self._stopping = True
        self.post(lambda: None)

    def listen(self, sock: socket.socket, on_ready: Callable[[], None]) -> None:
        self._selector.register(sock, READ, on_ready)

    def unlisten(self, sock: socket.socket) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(sock)

    def call_at(self, when: float, call: Callable[[], None]) -> None:
        self._timers.append((when, call))

    def spawn(self, task: Step) -> Step:
        self._waiting[task] = None
        self._resume(task, None, None)
        return task

    def alive(self, task: Step) -> bool:
        return task in self._waiting

    def cancel(self, task: Step) -> None:
        """Close ``task`` where it waits (its ``finally`` blocks run, its socket is closed)."""
        if task in self._waiting:
            self._forget_wait(task)
            del self._waiting[task]
            with contextlib.suppress(Exception):
                task.close()

    def run(self) -> None:
        """Until ``stop``; then every task is closed."""
        try:
            while not self._stopping:
                self._run_once()
        finally:
            self.close()

    def close(self) -> None:
        """Close every task and the loop's own sockets (``run`` does so when it ends)."""
        for task in list(self._waiting):
            self.cancel(task)
        self._selector.close()
        self._wake_reader.close()
        self._wake_writer.close()

    def _run_once(self) -> None:
        now = time.monotonic()
        deadlines = [wait.deadline for wait in self._waiting.values() if wait is not None and wait.deadline is not None]
        deadlines += [when for when, _ in self._timers]
        timeout = max(0.0, min(deadlines) - now) if deadlines else None
        for key, _ in self._selector.select(0 if self._posted else timeout):
            _guarded(key.data)
        while self._posted:
            _guarded(self._posted.popleft())
        self._expire(time.monotonic())

    def _expire(self, now: float) -> None:
        due = [(when, call) for when, call in self._timers if when <= now]
        if due:
            self._timers = [(when, call) for when, call in self._timers if when > now]
            for _, call in due:
                _guarded(call)
        for task, wait in list(self._waiting.items()):
            if wait is None or wait.deadline is None or wait.deadline > now:
                continue
            if self._waiting.get(task) is wait:  # not resumed or closed by an earlier one meanwhile
                self._resume(task, None, Timeout())

    def _drain_wakes(self) -> None:
        with contextlib.suppress(OSError):
            while self._wake_reader.recv(4096):
                pass

    def _forget_wait(self, task: Step) -> None:
        wait = self._waiting.get(task)
        if wait is not None and wait.sock is not None:
            with contextlib.suppress(KeyError, ValueError, OSError):
                self._selector.unregister(wait.sock)

    def _resume(self, task: Step, value: Any, error: BaseException | None) -> None:
        """Run ``task`` to its next wait (registering it) or to its end."""
        self._forget_wait(task)
        try:
            wait = task.throw(error) if error is not None else task.send(value)
        except StopIteration:
            self._waiting.pop(task, None)
            return
        except Exception:  # a connection's bug: logged, the connection dropped, the loop unharmed
            self._waiting.pop(task, None)
            log.exception("error serving a connection")
            return
        self._waiting[task] = wait
        if wait.sock is not None:
            try:
                self._selector.register(wait.sock, wait.events, lambda: self._ready(task, wait))
            except (OSError, ValueError, KeyError) as refused:  # a socket closed under it, say
                self._resume(task, None, refused if isinstance(refused, OSError) else OSError(str(refused)))
        elif wait.future is not None:
            wait.future.add_done_callback(lambda future: self.post(lambda: self._settled(task, wait, future)))

    def _ready(self, task: Step, wait: Wait) -> None:
        if self._waiting.get(task) is wait:
            self._resume(task, None, None)

    def _settled(self, task: Step, wait: Wait, future: Future[Any]) -> None:
        if self._waiting.get(task) is not wait:
            return  # cancelled, or timed out, meanwhile
        error = future.exception() if not future.cancelled() else Timeout("cancelled")
        self._resume(task, None if error is not None else future.result(), error)


def _guarded(call: Callable[[], None]) -> None:
    try:
        call()
    except Exception:  # whatever one callback does, the loop (and the accept loop with it) goes on
        log.exception("error in the web server's loop")
