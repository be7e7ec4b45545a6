"""TextfileWriter in process (it runs in the Windows suite too, where the rename replaces an existing file
with os.replace): what it writes, what it counts, and that close writes the last snapshot."""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from se_exporter.metrics.textfile import TextfileWriter
from tests.support.exposition import value
from tests.support.wait import wait_for


class Polls(Collector):
    def __init__(self) -> None:
        self.count = 0

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily("azure_scheduled_events_test_polls", "Polls seen.", value=self.count)


def _written(writer: TextfileWriter, count: int) -> bool:
    """One poll, its write awaited (done or failed: both are counted), then the file read while nothing
    writes it: on Windows a rename over a file someone is reading fails (the exporter's next poll, a second
    later, writes it again), and a test that read as it polled met that rename at every try under Wine."""
    tried = writer.writes + writer.errors
    writer.poll_done()
    wait_for(lambda: writer.writes + writer.errors > tried, 10, "the write after the poll")
    return value(writer.path.read_text(), "azure_scheduled_events_test_polls") == count


def test_each_poll_is_written_and_close_writes_the_last(tmp_path: Path) -> None:
    polls, writer = Polls(), TextfileWriter(tmp_path / "se.prom")
    writer.registry.register(polls)
    writer.probe()
    assert not list(tmp_path.iterdir()), "the probe leaves nothing behind"
    assert writer.write()
    writer.start()
    for count in (1, 2, 3):
        polls.count = count
        wait_for(functools.partial(_written, writer, count), 10, f"poll {count} written", interval=0.1)
    polls.count = 4
    writer.close()
    assert value((tmp_path / "se.prom").read_text(), "azure_scheduled_events_test_polls") == 4
    assert [p.name for p in tmp_path.iterdir()] == ["se.prom"]


def test_failed_writes_are_counted_and_said_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    writer = TextfileWriter(tmp_path / "missing" / "se.prom")
    writer.registry.register(Polls())
    with pytest.raises(OSError):
        writer.probe()
    with caplog.at_level(logging.INFO, logger="se_exporter.textfile"):
        assert [writer.write() for _ in range(3)] == [False, False, False]
        (tmp_path / "missing").mkdir()
        assert writer.write()
    assert writer.errors == 3
    path = tmp_path / "missing" / "se.prom"
    messages = [record.getMessage() for record in caplog.records]
    assert len(messages) == 2, messages
    assert messages[0].startswith(f"cannot write the textfile {path} (retried after every poll): ")
    assert messages[1] == f"the textfile {path} is written again"
