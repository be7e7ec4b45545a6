"""A running exporter imports what does the protocol work (DESIGN.md, The stack: prometheus_client, httpx,
asyncio with h11), and otherwise only what its configuration uses (memory and start-up are per VM, times
a fleet): no OpenTelemetry without an OTLP endpoint, no approval package without a policy, no YAML parser
without a file to read, never the simulator. Observed in the real process: ``sys.modules`` written by the
process itself once it has polled twice.

Not ``python -X importtime``, as before: it writes through C's stdio, which Wine's C runtime buffers when
stderr is a file, and the process is ended without a flush (no SIGTERM there), so the last imports'
lines were lost under Wine, and a check of what is absent would have passed for that reason alone.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.fake_imds import FakeIMDS
from tests.support.wait import wait_for

REPO = Path(__file__).resolve().parents[1]
# Runs the exporter's own __main__; when the test creates the trigger file, writes sys.modules and exits.
_RUNNER = """
import os, runpy, sys, threading, time
trigger, out = sys.argv[1], sys.argv[2]
def dump():
    while not os.path.exists(trigger):
        time.sleep(0.02)
    with open(out + ".part", "w", encoding="utf-8") as file:
        file.write("\\n".join(sorted(sys.modules)))
    os.replace(out + ".part", out)
    os._exit(0)
threading.Thread(target=dump, daemon=True).start()
sys.argv = ["se-exporter", *sys.argv[3:]]
runpy.run_module("se_exporter", run_name="__main__", alter_sys=True)
"""


def imported_by_run(fake_imds: FakeIMDS, tmp_path: Path, *flags: str, env: dict[str, str] | None = None) -> set[str]:
    """The modules a started exporter imported (by its second poll)."""
    trigger, out = tmp_path / "dump-modules", tmp_path / "modules.txt"
    command = [
        sys.executable,
        "-c",
        _RUNNER,
        str(trigger),
        str(out),
        "run",
        "--web.listen-address=127.0.0.1:0",
        f"--imds.url={fake_imds.url}",
        "--vm.name=vm-a",
        *flags,
    ]
    base = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PYTHONPATH": str(REPO)}
    base |= {name: os.environ[name] for name in ("SYSTEMROOT",) if name in os.environ}  # Windows' random needs it
    proc = subprocess.Popen(command, cwd=REPO, env={**base, **(env or {})})
    try:
        wait_for(lambda: len(fake_imds.event_requests()) >= 2, 20, "two polls")
        trigger.touch()
        wait_for(out.exists, 20, "the exporter's list of modules")
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    return set(out.read_text(encoding="utf-8").split("\n"))


def test_without_otlp_policy_or_actions_no_sdk_no_approval_no_actions_no_simulator(
    fake_imds: FakeIMDS, tmp_path: Path
) -> None:
    modules = imported_by_run(fake_imds, tmp_path)
    assert "se_exporter.poller" in modules  # it did run
    for heavy in (
        "opentelemetry",  # not even the API: no span is made without an OTLP endpoint
        "google.protobuf",
        "grpc",
        "yaml",
        "se_exporter.approval.approver",
        "se_exporter.actions.runner",
        "se_exporter.actions.config",
        "se_exporter.simulator",
    ):
        assert not [m for m in modules if m == heavy or m.startswith(heavy + ".")], heavy


def test_the_designs_stack_does_the_protocol_work(fake_imds: FakeIMDS, tmp_path: Path) -> None:
    """prometheus_client writes /metrics (with its process, platform and GC collectors), httpx (over httpcore)
    talks to IMDS, asyncio and h11 run the web server, hashlib makes the digests."""
    modules = imported_by_run(fake_imds, tmp_path)
    stack = {"prometheus_client.exposition", "prometheus_client.process_collector", "httpx", "httpcore"}
    assert stack | {"asyncio", "h11", "hashlib"} <= modules


@pytest.mark.posix
@pytest.mark.parametrize("what", ["otlp", "policy"])
def test_what_is_configured_is_imported(fake_imds: FakeIMDS, tmp_path: Path, what: str) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text("rules:\n  - name: users\n    causes: [user]\n")
    if what == "otlp":
        modules = imported_by_run(
            fake_imds, tmp_path, env={"OTEL_TRACES_EXPORTER": "console", "OTEL_LOGS_EXPORTER": "none"}
        )
        assert "opentelemetry.sdk.trace" in modules
    else:
        modules = imported_by_run(fake_imds, tmp_path, f"--approval.config={policy}")
        assert "se_exporter.approval.approver" in modules and "opentelemetry.sdk" not in modules


def test_otlp_over_http_is_the_sdks_and_its_official_exporters_without_grpc(
    fake_imds: FakeIMDS, tmp_path: Path
) -> None:
    """Spans by the SDK's tracer, sent with its protobuf runtime by the official OTLP/HTTP exporters; gRPC only
    when OTEL_EXPORTER_OTLP_PROTOCOL asks for it."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        endpoint = f"http://127.0.0.1:{sock.getsockname()[1]}"  # nobody listens: only the imports matter
    modules = imported_by_run(fake_imds, tmp_path, env={"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint})
    official = {
        "opentelemetry.exporter.otlp.proto.http.trace_exporter",
        "opentelemetry.exporter.otlp.proto.http._log_exporter",
    }
    assert official | {"opentelemetry.sdk.trace", "google.protobuf"} <= modules
    assert not [m for m in modules if m == "grpc" or m.startswith("grpc.")]
