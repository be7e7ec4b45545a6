"""The web server's loop (``web/loop.py``) on real sockets: what a connection's generator waits for is what
wakes it, a missed deadline is thrown into it, and nothing one generator does stops the others."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Generator, Iterator
from concurrent.futures import Future
from typing import Any

import pytest

from se_exporter.web.loop import READ, Loop, Timeout, Wait

Seen = list[tuple[str, object]]


@pytest.fixture
def loop() -> Iterator[Loop]:
    running = Loop()
    thread = threading.Thread(target=running.run, daemon=True)
    thread.start()
    yield running
    running.stop()
    thread.join(5)
    assert not thread.is_alive()


def spawn_on(loop: Loop, task: Generator[Wait, Any, None]) -> None:
    """Start ``task`` on the loop's own thread."""

    def start() -> None:
        loop.spawn(task)

    loop.post(start)


def wait_for(condition: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.005)


def reader(name: str, sock: socket.socket, seen: Seen, deadline: float) -> Generator[Wait, Any, None]:
    try:
        yield Wait(deadline, sock, READ)
        seen.append((name, sock.recv(100)))
    except Timeout:
        seen.append((name, "timeout"))
    finally:
        seen.append((name, "closed"))


def test_a_readable_socket_wakes_its_task_and_a_silent_one_times_out(loop: Loop) -> None:
    seen: Seen = []
    quick, quick_peer = socket.socketpair()
    silent, silent_peer = socket.socketpair()
    spawn_on(loop, reader("silent", silent, seen, time.monotonic() + 0.3))
    spawn_on(loop, reader("quick", quick, seen, time.monotonic() + 30))
    quick_peer.send(b"hello")
    wait_for(lambda: len(seen) == 4)
    assert seen == [("quick", b"hello"), ("quick", "closed"), ("silent", "timeout"), ("silent", "closed")]
    for sock in (quick, quick_peer, silent, silent_peer):
        sock.close()


def test_a_future_settled_on_another_thread_sends_its_result_in(loop: Loop) -> None:
    seen: Seen = []
    future: Future[str] = Future()

    def waiter() -> Generator[Wait, Any, None]:
        seen.append(("result", (yield Wait(None, future=future))))

    spawn_on(loop, waiter())
    threading.Timer(0.05, lambda: future.set_result("rendered")).start()
    wait_for(lambda: seen)
    assert seen == [("result", "rendered")]


def test_a_failing_task_is_dropped_and_the_others_go_on(loop: Loop, caplog: pytest.LogCaptureFixture) -> None:
    seen: Seen = []
    broken, broken_peer = socket.socketpair()
    fine, fine_peer = socket.socketpair()

    def failing() -> Generator[Wait, Any, None]:
        yield Wait(time.monotonic() + 30, broken, READ)
        raise RuntimeError("a bug in one connection")

    spawn_on(loop, failing())
    spawn_on(loop, reader("fine", fine, seen, time.monotonic() + 30))
    broken_peer.send(b"x")
    wait_for(lambda: "a bug in one connection" in caplog.text)
    fine_peer.send(b"still served")
    wait_for(lambda: len(seen) == 2)
    assert seen == [("fine", b"still served"), ("fine", "closed")]
    for sock in (broken, broken_peer, fine, fine_peer):
        sock.close()


def test_cancel_closes_a_waiting_task_and_stop_closes_the_rest() -> None:
    seen: Seen = []
    one, one_peer = socket.socketpair()
    two, two_peer = socket.socketpair()
    loop = Loop()
    first = loop.spawn(reader("one", one, seen, time.monotonic() + 30))
    loop.spawn(reader("two", two, seen, time.monotonic() + 30))
    loop.cancel(first)
    assert seen == [("one", "closed")] and not loop.alive(first)
    loop.stop()
    loop.run()  # stops at once, closing what still waits
    assert seen == [("one", "closed"), ("two", "closed")]
    for sock in (one, one_peer, two, two_peer):
        sock.close()
