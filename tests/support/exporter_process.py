"""The exporter as a real subprocess (`python -m se_exporter`), scraped over loopback."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx

from tests.support.wait import wait_for

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ExporterProcess:
    def __init__(self, *args: str, env: dict[str, str] | None = None, log_path: Path, command: str = "run") -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        full_env = {k: v for k, v in os.environ.items() if not k.startswith(("SE_EXPORTER_", "OTEL_"))}
        full_env.update(env or {})
        self._log = log_path.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "se_exporter", command, f"--web.listen-address=127.0.0.1:{self.port}", *args],
            cwd=REPO,
            env=full_env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def get(self, path: str) -> httpx.Response:
        return httpx.get(self.url + path, timeout=5, trust_env=False)

    def metrics(self) -> str:
        return self.get("/metrics").text

    def wait_ready(self, timeout: float = 20) -> None:
        wait_for(lambda: self._alive() and self.get("/-/ready").status_code == 200, timeout, "exporter ready")

    def wait_listening(self, timeout: float = 20) -> None:
        wait_for(lambda: self._alive() and self.get("/-/healthy").status_code == 200, timeout, "exporter up")

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        finally:
            self._log.close()

    def _alive(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"exporter exited with {self.proc.returncode}:\n{self.logs()[-3000:]}")
        return True
