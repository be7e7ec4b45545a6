"""A flood of idle connections costs file descriptors, not threads, and scrapes still get through at
once (2,960 idle connections once made 2,030 threads and 95 MiB). The exporter as a real process."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tests.support.exporter_process import ExporterProcess
from tests.support.fake_imds import FakeIMDS

pytestmark = pytest.mark.posix
CONNECTIONS = 900


def status(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text(encoding="utf-8").splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(field)


def test_idle_connections_hold_no_thread_and_scrapes_get_through(
    fake_imds: FakeIMDS, start_exporter: Callable[..., ExporterProcess]
) -> None:
    import resource  # POSIX only, like this module (marked posix): Windows has no such module

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < CONNECTIONS + 100:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, CONNECTIONS + 200), hard))
    exporter = start_exporter(f"--imds.url={fake_imds.url}", "--poll.interval=250ms", "--vm.name=vm-a")
    exporter.wait_ready()
    threads_before = status(exporter.proc.pid, "Threads")
    idle: list[socket.socket] = []
    try:
        for _ in range(CONNECTIONS):
            idle.append(socket.create_connection(("127.0.0.1", exporter.port), timeout=5))
        # Answered while every idle connection is still open and silent (they never send a byte): a scrape
        # that waited behind them would wait for ever, past the client's 10 s.
        scrape = httpx.get(f"{exporter.url}/metrics", timeout=10)
        assert scrape.status_code == 200 and "azure_scheduled_events_imds_up 1.0" in scrape.text
        threads = status(exporter.proc.pid, "Threads")
        assert threads <= threads_before + 2, f"{threads} threads for {CONNECTIONS} idle connections"
        assert status(exporter.proc.pid, "VmRSS") < 96 * 1024
    finally:
        for sock in idle:
            with contextlib.suppress(OSError):
                sock.close()
    assert exporter.stop() == 0
