"""The exporter as a real subprocess (`python -m se_exporter`), scraped over loopback."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx

from se_exporter.app import STOP_SECONDS as EXPORTER_STOP_SECONDS
from tests.support.wait import wait_for

REPO = Path(__file__).resolve().parents[2]
# A clean stop takes at most EXPORTER_STOP_SECONDS (app.py), whatever the disk or the collector does; the
# margin is for a loaded machine (the image build beside the suite in CI). A stop that takes longer shows
# where each thread waits (``_stacks``). A test that needs a quick stop passes its own bound.
STOP_SECONDS = EXPORTER_STOP_SECONDS + 30


# The exporter binds port 0 and logs the address it got (``app.py``: "listening on <url>"): no port is
# chosen here and left free for another process to take before the exporter binds it.
LISTENING = re.compile(r"listening on https?://[^\s\"]+?:(\d+)/")


def bound_port(logs: str) -> int | None:
    """The port of an exporter's "listening on" line in ``logs``, None before it."""
    found = LISTENING.search(logs)
    return int(found.group(1)) if found else None


@contextlib.contextmanager
def refused_port() -> Iterator[int]:
    """A loopback port that refuses connections while the block runs: bound, never listening, so that no
    other process can take it meanwhile (a port found free and closed could be anyone's a moment later)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield int(sock.getsockname()[1])


class ExporterProcess:
    def __init__(
        self, *args: str, env: dict[str, str] | None = None, log_path: Path, command: str = "run", serve: bool = True
    ) -> None:
        """``serve=False``: ``--web.listen-address=`` (no port; with ``--textfile.path``)."""
        self._port: int | None = None
        self.log_path = log_path
        full_env = {k: v for k, v in os.environ.items() if not k.startswith(("SE_EXPORTER_", "OTEL_"))}
        full_env["PYTHONFAULTHANDLER"] = "1"  # a SIGABRT writes every thread's stack to the log (see ``stop``)
        temp = log_path.parent / "tmp"  # what a killed exporter leaves (a hook's event file) stays the test's
        temp.mkdir(exist_ok=True)
        full_env["TMPDIR"] = str(temp)
        full_env.update(env or {})
        self._log = log_path.open("ab")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "se_exporter",
                command,
                "--web.listen-address=127.0.0.1:0" if serve else "--web.listen-address=",
                *args,
            ],
            cwd=REPO,
            env=full_env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    @property
    def port(self) -> int:
        """The port the exporter bound, from its "listening on" line (waited for)."""
        if self._port is None:
            self._port = wait_for(self._bound_port, 20, "the exporter's 'listening on' line", retry_on=())
        return self._port

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _bound_port(self) -> int | None:
        self._alive()
        return bound_port(self.logs())

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

    def transitions(self) -> list[str]:
        """The transitions its log lines name, in order (``transition=scheduled``...)."""
        return re.findall(r"transition=(\w+)", self.logs())

    def stop(self, sig: int = signal.SIGTERM, timeout: float = STOP_SECONDS) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"no exit {timeout:g} s after {signal.Signals(sig).name}: {self._stacks()}") from None
        finally:
            self._log.close()

    def _stacks(self) -> str:
        """Where each thread of a process that does not stop waits: its stacks, as faulthandler writes them."""
        if os.name == "nt":  # no SIGABRT to send to another process
            self.proc.kill()
            return "the process was killed"
        self.proc.send_signal(signal.SIGABRT)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self._log.flush()
        return "where its threads were:\n" + self.logs()[-6000:]

    def _alive(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"exporter exited with {self.proc.returncode}:\n{self.logs()[-3000:]}")
        return True
