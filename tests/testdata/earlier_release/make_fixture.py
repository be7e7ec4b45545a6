"""Run the release before the state database (the checkout on ``sys.path``) to write its state file and log
spool's journal: see README.md beside it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from tests.support.fake_imds import FakeIMDS, document, scheduled_event

E1 = scheduled_event("E1")
E2 = scheduled_event("E2", EventType="Freeze", DurationInSeconds=9)


def main(out: Path) -> None:
    imds = FakeIMDS().start()
    imds.respond = lambda seen: document(1, E1, E2)
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))  # bound, never listening: the collector is down
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "SE_EXPORTER_"))}
    env |= {
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{dead.getsockname()[1]}",
        "OTEL_BSP_SCHEDULE_DELAY": "100",
    }
    args = [
        *(sys.executable, "-m", "se_exporter", "run", f"--imds.url={imds.url}", "--poll.interval=250ms"),
        *(f"--state.file={out / 'state.json'}", "--web.listen-address=127.0.0.1:0", "--vm.name=vm-a"),
    ]
    with (out / "run.log").open("w") as log:
        proc = subprocess.Popen(args, stderr=log, env=env)
        wait_until(out, lambda text: text.count("scheduled_event.transition=scheduled") == 2)
        imds.respond = lambda seen: document(2, scheduled_event("E1", EventStatus="Started"), E2)
        wait_until(out, lambda text: "scheduled_event.transition=started" in text)
        proc.send_signal(signal.SIGTERM)
        print("exit", proc.wait(30))
    imds.stop()


def wait_until(out: Path, done: Callable[[str], bool]) -> None:
    deadline = time.monotonic() + 30
    while not done((out / "run.log").read_text()):
        if time.monotonic() > deadline:
            raise SystemExit((out / "run.log").read_text())
        time.sleep(0.1)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
