"""exporter-toolkit itself beside se-exporter (issue 65, point 7): a minimal server on the toolkit's ``web``
package (``tests/exporter_toolkit/``, built from its Go module) and se-exporter's server are given the same
web config file of the ported table (``test_exporter_toolkit_table.py``) and asked the same way; their
answers must agree, except where ``DIFFERENCES`` (and SECURITY.md) says why they do not.

CollectorAnswers are compared by kind: refused at load, ok, the HTTP status, or the TLS alert the client got (the
client is the same Python in both runs, so an alert reads the same whichever server sent it). The texts of
a refusal differ by nature (Go's errors and ours) and are not compared.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from se_exporter.errors import ConfigError
from se_exporter.web.server import WebServer
from tests.support.go_build import TESTS, go_build
from tests.support.proc_sockets import listening_ports
from tests.support.wait import wait_for
from tests.web.test_exporter_toolkit_table import CASES, DIFFERENCES, OK, Case, outcome, serve_config, testdata

pytestmark = [pytest.mark.posix, pytest.mark.full]
__all__ = ["serve_config", "testdata"]  # the table's fixtures, used here as they are


# Where the toolkit built today does not do what its own test table expects and se-exporter does (SECURITY.md).
TOOLKIT_TODAY = {
    "valid tls config yml with multiple client ciphers, client chooses cipher": (
        "Go 1.17 and later pick a TLS 1.2 cipher suite by their own order, not the client's "
        "(crypto/tls ignores PreferServerCipherSuites); se-exporter lets the client's order win, as the "
        "toolkit's table expects"
    ),
}
# Differences of the table that a Python client cannot bring out: both servers answer it alike here.
NOT_OBSERVABLE = {
    "valid tls config yml with no common curves": (
        "a Python client cannot limit the groups it offers, so neither server is left without a common curve"
    ),
}


@dataclass
class ToolkitServer:
    port: int


@pytest.fixture(scope="module")
def toolkit_binary() -> Path:
    return go_build(TESTS / "exporter_toolkit")


@pytest.fixture
def serve_toolkit(testdata: Path, toolkit_binary: Path) -> Iterator[Callable[[str | None], ToolkitServer]]:
    """The toolkit's server on a config of the testdata (or none); a config it refuses raises ConfigError."""
    started: list[subprocess.Popen[str]] = []

    def start(name: str | None) -> ToolkitServer:
        args = [str(toolkit_binary), *([f"--web.config.file={testdata / name}"] if name else [])]
        proc = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        started.append(proc)
        wait_for(lambda: proc.poll() is not None or bool(listening_ports(proc.pid)), 30, "the toolkit's server up")
        if proc.poll() is not None:
            assert proc.stderr is not None
            raise ConfigError(f"toolkit: {proc.stderr.read().strip()}")
        return ToolkitServer(listening_ports(proc.pid)[0])

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)


def kind(answer: str) -> str:
    if answer.startswith("config: "):
        return "refused at load"
    if answer == OK or answer.startswith("alert: ") or answer.startswith("TLS to a plain"):
        return answer
    return answer.split(":", 1)[0]  # an HTTP status: the bodies are each server's words


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_the_toolkit_and_se_exporter_answer_alike(
    case: Case,
    testdata: Path,
    serve_config: Callable[[str | None], WebServer],
    serve_toolkit: Callable[[str | None], ToolkitServer],
) -> None:
    ours = outcome(case, testdata, serve_config)
    theirs = outcome(case, testdata, serve_toolkit)  # type: ignore[arg-type]  # a server is its port to a client
    if case.name in TOOLKIT_TODAY:
        assert ours == OK and kind(theirs) != OK, f"se-exporter {ours!r}; the toolkit {theirs!r}"
    elif case.name in DIFFERENCES and case.name not in NOT_OBSERVABLE:
        assert kind(ours) != kind(theirs), f"no longer a difference: {ours!r}; the toolkit {theirs!r}"
    else:
        assert kind(ours) == kind(theirs), f"se-exporter {ours!r}; the toolkit {theirs!r}"
