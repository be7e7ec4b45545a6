"""The simulator's HTTP server: lifecycle and the background ticker."""

from __future__ import annotations

import threading
from types import TracebackType

from se_exporter.simulator.faults import FaultPlan
from se_exporter.simulator.handler import SimHTTPServer
from se_exporter.simulator.world import SimWorld


class SimulatorServer:
    """Serves ``world`` over HTTP on ``host:port`` (``port=0``: an ephemeral port).

    The socket is bound at construction, so :attr:`url` is known before :meth:`start`. A ticker
    thread calls ``world.tick()`` every ``tick_interval`` real seconds so changes happen (and are
    recorded) on time even when nobody polls; requests also bring the world up to date first.
    """

    def __init__(
        self,
        world: SimWorld,
        *,
        faults: FaultPlan | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        tick_interval: float = 0.05,
    ) -> None:
        self._world = world
        self._faults = faults or FaultPlan()
        self._httpd = SimHTTPServer((host, port), world, self._faults)
        self._tick_interval = tick_interval
        self._threads: list[threading.Thread] = []

    @property
    def world(self) -> SimWorld:
        return self._world

    @property
    def faults(self) -> FaultPlan:
        return self._faults

    @property
    def host(self) -> str:
        return str(self._httpd.server_address[0])

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:43125`` (IPv6 hosts in brackets)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def start(self) -> SimulatorServer:
        if self._threads:
            raise RuntimeError("server already started")
        self._threads = [
            threading.Thread(
                target=self._httpd.serve_forever, kwargs={"poll_interval": 0.1}, name="sim-http", daemon=True
            ),
            threading.Thread(target=self._tick_forever, name="sim-ticker", daemon=True),
        ]
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket (idempotent)."""
        self._httpd.stopping.set()
        if self._threads:
            self._httpd.shutdown()
            for thread in self._threads:
                thread.join(timeout=5)
            self._threads = []
        self._httpd.server_close()

    def _tick_forever(self) -> None:
        while not self._httpd.stopping.wait(self._tick_interval):
            self._world.tick()

    def __enter__(self) -> SimulatorServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
