"""``--textfile.path``: the exporter's series reach Prometheus through a real node_exporter's textfile collector
(Debian's ``prometheus-node-exporter``), with no port of the exporter's own."""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.processes import ManagedProcess
from tests.support.exporter_process import ExporterProcess
from tests.support.exposition import samples, series, value
from tests.support.fake_imds import FakeIMDS, document, scheduled_event
from tests.support.tools import require
from tests.support.wait import wait_for

pytestmark = [pytest.mark.posix, pytest.mark.full]

StartExporter = Callable[..., ExporterProcess]
EVENT = scheduled_event("E1", EventSource="Platform")
STARTED = dict(EVENT, EventStatus="Started", NotBefore="")


class NodeExporter(ManagedProcess):
    name = "node_exporter"

    def __init__(self, directory: Path, log_path: Path) -> None:
        super().__init__(
            [
                require("prometheus-node-exporter", "node_exporter"),
                "--collector.disable-defaults",
                "--collector.textfile",
                f"--collector.textfile.directory={directory}",
                "--web.listen-address=127.0.0.1:0",
            ],
            log_path,
        )

    def metrics(self) -> str:
        self.alive()
        return httpx.get(f"{self.url}/metrics", timeout=5, trust_env=False).text


@pytest.fixture
def node_exporter(tmp_path: Path) -> Iterator[NodeExporter]:
    directory = tmp_path / "textfile"
    directory.mkdir()
    node = NodeExporter(directory, tmp_path / "node_exporter.log")
    try:
        wait_for(lambda: "node_textfile_scrape_error" in node.metrics(), 20, "node_exporter serving")
        yield node
    finally:
        node.stop()


def _textfile(node: NodeExporter) -> Path:
    return Path(node.argv[3].split("=", 1)[1]) / "se-exporter.prom"


def _listening_inodes() -> set[str]:
    """Socket inodes of every listening TCP socket on this machine (/proc/net/tcp{,6}: state 0A)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A":
                inodes.add(fields[9])
    return inodes


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if match := re.fullmatch(r"socket:\[(\d+)\]", target):
            inodes.add(match.group(1))
    return inodes


def _polled(text: str) -> str | None:
    return text if value(text, "azure_scheduled_events_imds_up") == 1 else None


def test_node_exporter_serves_our_series_through_a_link_and_the_exporter_no_port(
    tmp_path: Path, fake_imds: FakeIMDS, start_exporter: StartExporter, node_exporter: NodeExporter
) -> None:
    """As docs/deploy.md sets it up: the file in the exporter's own directory (the drop-in's /run/se-exporter),
    a link to it in node_exporter's textfile directory, a umask of 022 and the state file beside."""
    run = tmp_path / "run"
    run.mkdir()
    path, state = run / "se-exporter.prom", run / "state.db"
    _textfile(node_exporter).symlink_to(path)
    fake_imds.respond = lambda seen: document(1, EVENT)
    args = (f"--imds.url={fake_imds.url}", "--poll.interval=250ms", f"--textfile.path={path}", f"--state.file={state}")
    previous = os.umask(0o022)
    try:
        exporter = start_exporter(*args, serve=False)
    finally:
        os.umask(previous)
    text = wait_for(lambda: _polled(node_exporter.metrics()), 20, "our series on node_exporter's /metrics")
    (event,) = series(text, "azure_scheduled_events_event_info")
    assert (event["event_id"], event["event_status"], event["impact"], event["cause"]) == (
        "E1",
        "Scheduled",
        "reboot",
        "platform",
    )
    assert value(text, "node_textfile_scrape_error") == 0
    assert value(text, "azure_scheduled_events_persistence_errors_total", file="textfile") == 0
    assert value(text, "python_info") is None, "only our families: node_exporter serves its own process_*"
    assert (path.stat().st_mode & 0o777, state.stat().st_mode & 0o777) == (0o644, 0o600)
    assert "serving no port" in exporter.logs()
    assert not _socket_inodes(exporter.proc.pid) & _listening_inodes(), "the exporter listens on no port"
    assert exporter.stop() == 0
    assert path.exists(), "the file stays, so the staleness alert can say the exporter is gone"


def test_the_file_is_never_seen_half_written(
    fake_imds: FakeIMDS, start_exporter: StartExporter, node_exporter: NodeExporter
) -> None:
    """300 events rewritten four times a second; node_exporter and a reader of the file itself see every
    one of them every time, never a part."""
    path = _textfile(node_exporter)
    events = [scheduled_event(f"E{n:03}", EventSource="Platform") for n in range(300)]
    incarnation = iter(range(1, 1_000_000))
    fake_imds.respond = lambda seen: document(next(incarnation), *events)  # a new document at every poll
    start_exporter(f"--imds.url={fake_imds.url}", "--poll.interval=250ms", f"--textfile.path={path}", serve=False)
    wait_for(lambda: path.exists() and "E299" in path.read_text(), 20, "all 300 events in the file")
    counts: list[int] = []
    stop = threading.Event()

    def read_file() -> None:
        while not stop.is_set():
            counts.append(path.read_text().count("azure_scheduled_events_event_info{"))

    reader = threading.Thread(target=read_file)
    reader.start()
    # Counted, not timed: 25 scrapes and 100 reads, across 16 rewrites of the file (a poll each).
    scraped: list[tuple[float | None, int]] = []
    rewrites_from, began = len(fake_imds.event_requests()), time.monotonic()
    try:
        while len(scraped) < 25 or len(counts) < 100 or len(fake_imds.event_requests()) < rewrites_from + 16:
            assert time.monotonic() - began < 300, f"{len(scraped)} scrapes and {len(counts)} reads in 300 s"
            text = node_exporter.metrics()
            scraped.append(
                (value(text, "node_textfile_scrape_error"), text.count("azure_scheduled_events_event_info{"))
            )
    finally:
        stop.set()
        reader.join(10)
    assert set(scraped) == {(0, 300)}, set(scraped)
    assert set(counts) == {300}, f"{len(counts)} reads: {set(counts)}"


def test_a_restart_keeps_the_lifecycle_in_the_textfile(
    tmp_path: Path, fake_imds: FakeIMDS, start_exporter: StartExporter, node_exporter: NodeExporter
) -> None:
    path, state = _textfile(node_exporter), tmp_path / "state.db"
    args = (f"--imds.url={fake_imds.url}", "--poll.interval=250ms", f"--textfile.path={path}", f"--state.file={state}")
    fake_imds.respond = lambda seen: document(1, EVENT)
    first = start_exporter(*args, serve=False)
    fake_imds.respond = lambda seen: document(2, STARTED)

    def started(text: str) -> float | None:
        return value(text, "azure_scheduled_events_event_started_seconds", event_id="E1", event_type="Reboot")

    wait_for(lambda: started(node_exporter.metrics()) is not None, 20, "the event Started, through node_exporter")
    started_at = time.time()
    wait_for(lambda: (started(node_exporter.metrics()) or 0) >= 1, 20, "a second in Started")
    assert first.stop(signal.SIGTERM) == 0
    path.unlink()  # what node_exporter serves from now on is the second exporter's
    second = start_exporter(*args, serve=False)
    text = wait_for(lambda: _polled(node_exporter.metrics()), 20, "the second exporter's file")
    seconds = started(text)
    assert seconds is not None and seconds >= time.time() - started_at - 1, f"time in Started restarted: {seconds}"
    # The second process counted no transition: the lifecycle went on, nothing was Scheduled or Started anew.
    assert not [key for key in samples(text) if key[0] == "azure_scheduled_events_transitions_total"], text
    fake_imds.respond = lambda seen: document(3)
    wait_for(
        lambda: (
            value(
                node_exporter.metrics(),
                "azure_scheduled_events_transitions_total",
                event_type="Reboot",
                transition="completed",
            )
            == 1
        ),
        20,
        "completed counted once, by the second exporter",
    )
    assert second.stop() == 0


def test_a_write_that_fails_is_counted_said_once_and_retried(
    tmp_path: Path, fake_imds: FakeIMDS, start_exporter: StartExporter
) -> None:
    directory = tmp_path / "textfile"
    directory.mkdir()
    fake_imds.respond = lambda seen: document(1, EVENT)
    exporter = start_exporter(
        f"--imds.url={fake_imds.url}",
        "--poll.interval=250ms",
        env={"SE_EXPORTER_TEXTFILE_PATH": f"{directory}/se.prom"},
    )
    exporter.wait_ready()
    wait_for(lambda: "E1" in (directory / "se.prom").read_text(), 10, "the event in the file")
    directory.rename(tmp_path / "away")  # every write fails from now on

    def errors() -> float:
        return value(exporter.metrics(), "azure_scheduled_events_persistence_errors_total", file="textfile") or 0

    wait_for(lambda: errors() >= 4, 10, "failed writes counted on /metrics")
    assert exporter.logs().count("cannot write the textfile") == 1, "one line per streak"
    assert "No such file or directory" in exporter.logs()
    (tmp_path / "away").rename(directory)
    wait_for(lambda: "is written again" in exporter.logs(), 10, "the writes resume")
    assert "E1" in (directory / "se.prom").read_text()
    assert not list(directory.glob("se.prom.*")), "no temporary file left behind"
