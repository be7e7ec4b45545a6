"""The TCP ports a Linux process listens on, read from ``/proc``: for servers that log the address they were
given (``127.0.0.1:0``) rather than the one they got, so no port is chosen for them and raced for."""

from __future__ import annotations

import os
from pathlib import Path

LISTEN = "0A"  # the kernel's TCP_LISTEN, as /proc/net/tcp writes a socket's state


def socket_inodes(pid: int) -> set[str]:
    """The inodes of the sockets the process holds open (its fds read ``socket:[inode]``)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:  # closed between the listing and the read
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    return inodes


def listening_ports(pid: int) -> list[int]:
    """The IPv4 and IPv6 TCP ports the process listens on, in the kernel's order."""
    inodes = socket_inodes(pid)
    ports = []
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == LISTEN and inode in inodes:
                ports.append(int(local.rsplit(":", 1)[1], 16))
    return ports
