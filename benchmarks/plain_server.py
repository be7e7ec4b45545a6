"""A plain prometheus_client exporter in its own process: the usual way, for bench_metrics to compare with.

``python -m benchmarks.plain_server EXPOSITION`` builds Gauges and Counters holding the series of the
exposition file (what se-exporter served), serves them with ``start_http_server`` on 127.0.0.1, port 0,
prints ``listening on http://127.0.0.1:PORT/`` and serves until it is terminated.
"""

from __future__ import annotations

import sys
from pathlib import Path

from prometheus_client import start_http_server

from benchmarks.bench_metrics import plain_registry


def main() -> None:
    exposition = Path(sys.argv[1]).read_text(encoding="utf-8")
    server, thread = start_http_server(0, addr="127.0.0.1", registry=plain_registry(exposition))
    print(f"listening on http://127.0.0.1:{server.server_address[1]}/", flush=True)
    thread.join()  # until SIGTERM


if __name__ == "__main__":
    main()
