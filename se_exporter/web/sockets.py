"""What the server does with a socket besides HTTP: bind it, wait for it to be readable, name its peer."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import socket


async def readable(loop: asyncio.AbstractEventLoop, sock: socket.socket, timeout: float) -> bool:
    if timeout <= 0:
        return False
    ready: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(sock.fileno(), wake)
    try:
        async with asyncio.timeout(timeout):
            await ready
        return True
    except TimeoutError:
        return False
    finally:
        loop.remove_reader(sock.fileno())


def client_name(address: object) -> str:
    return str(address[0]) if isinstance(address, tuple) and address else str(address)


# Connections the kernel holds for us while every open one is working (web/server.py stops accepting then):
# 300 clients at once must wait there, not be refused (Linux caps it at net.core.somaxconn).
BACKLOG = 1024
DEFER_SECONDS = 5  # a silent client's connection is handed over after this at the latest (Linux)


def bind(host: str, port: int) -> socket.socket:
    """A listening socket: ``""`` and ``"::"`` take every address, IPv4 too (like Go's ":port")."""
    return _defer_accept(_listen(host, port))


def _listen(host: str, port: int) -> socket.socket:
    if host in ("", "::") and socket.has_ipv6:
        with contextlib.suppress(OSError, ValueError):  # ValueError: no dual-stack sockets here
            return socket.create_server(("::", port), family=socket.AF_INET6, dualstack_ipv6=True, backlog=BACKLOG)
        if host == "::":
            raise OSError(errno.EAFNOSUPPORT, "IPv6 is not available", host)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host or "0.0.0.0", port), family=family, backlog=BACKLOG)


def _defer_accept(listener: socket.socket) -> socket.socket:
    """On Linux, a connection is handed over once its client sent something (or after ``DEFER_SECONDS`` of
    silence): a client that connects and writes its request a moment later is never taken for an idle
    connection the server may close to make room (web/server.py), and silent ones wait in the kernel. Where
    the option does not exist, a connection is handed over at once (a request not yet written may then be
    cut at the bound: docs/reliability.md)."""
    option = getattr(socket, "TCP_DEFER_ACCEPT", None)
    if option is not None:
        with contextlib.suppress(OSError):
            listener.setsockopt(socket.IPPROTO_TCP, option, DEFER_SECONDS)
    return listener
