"""The state file on disk, whatever is found there: one exporter per file, and a start that always comes
up (a FIFO, a file too large to hold, a crash's temporary files, a file system out of inodes)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.exporter_process import ExporterProcess
from tests.support.exposition import value
from tests.support.fake_imds import FakeIMDS, document, scheduled_event
from tests.support.tmpfs import small_tmpfs
from tests.support.wait import wait_for

pytestmark = pytest.mark.posix

StartExporter = Callable[..., ExporterProcess]
ERRORS = "azure_scheduled_events_persistence_errors_total"
EVENT = scheduled_event("E1", EventSource="Platform")


def args(fake_imds: FakeIMDS, state: Path) -> tuple[str, ...]:
    return f"--imds.url={fake_imds.url}", "--poll.interval=250ms", f"--state.file={state}", "--vm.name=vm-a"


def test_a_second_exporter_on_the_same_state_file_is_refused_naming_the_first(
    tmp_path: Path, fake_imds: FakeIMDS, start_exporter: StartExporter
) -> None:
    state = tmp_path / "state.db"
    first = start_exporter(*args(fake_imds, state))
    first.wait_ready()
    second = start_exporter(*args(fake_imds, state))
    assert second.proc.wait(20) == 2
    assert second.logs().strip().splitlines()[-1] == (
        f"se-exporter: error: --state.file: {state} is in use by another se-exporter (pid {first.proc.pid}); "
        "two on one state file would approve every event twice"
    )
    assert first.stop() == 0
    third = start_exporter(*args(fake_imds, state))  # the lock went with the first process
    third.wait_ready()
    assert third.stop() == 0


def test_a_fifo_as_state_file_does_not_hang_the_start_and_is_replaced(
    tmp_path: Path, fake_imds: FakeIMDS, start_exporter: StartExporter
) -> None:
    state = tmp_path / "state.db"
    os.mkfifo(state)
    fake_imds.respond = lambda seen: document(1, EVENT)
    exporter = start_exporter(*args(fake_imds, state))
    exporter.wait_ready()
    wait_for(lambda: state.is_file(), 10, "the FIFO replaced by the first save")
    assert "not a regular file" in exporter.logs()
    assert value(exporter.metrics(), ERRORS, file="state") == 1


def test_a_state_file_too_large_to_hold_is_set_aside_said_and_counted(
    tmp_path: Path, fake_imds: FakeIMDS, start_exporter: StartExporter
) -> None:
    state = tmp_path / "state.db"
    state.write_bytes(b'{"version": 1, "sections": {"store": "' + b"x" * (17 << 20) + b'"}}')
    fake_imds.respond = lambda seen: document(1, EVENT)
    exporter = start_exporter(*args(fake_imds, state))
    exporter.wait_ready()
    assert value(exporter.metrics(), ERRORS, file="state") == 1
    assert (tmp_path / "state.db.discarded").stat().st_size > 17 << 20
    assert f"kept as {tmp_path / 'state.db.discarded'}" in exporter.logs()
    wait_for(lambda: state.is_file() and state.stat().st_size < 10_000, 10, "a new, small state file")


@pytest.mark.parametrize("importing", [True, False], ids=["importing-0.1", "a-database"])
def test_temporary_files_an_earlier_release_left_are_removed_when_its_state_file_is_imported(
    tmp_path: Path, fake_imds: FakeIMDS, start_exporter: StartExporter, importing: bool
) -> None:
    """0.1 wrote its state file atomically through temporary files beside it; a crash left them. They are
    swept once, by the import; a start on a database looks at nothing else in the directory."""
    state = tmp_path / "state.db"
    if importing:
        state.write_text('{"version": 1, "sections": {}}')
    leftovers = [tmp_path / ".state.db.k2j4h1.tmp", tmp_path / ".state.db.spool.abc.tmp"]
    for leftover in leftovers:
        leftover.write_bytes(b"half a save")
    unrelated = tmp_path / ".other.json.x.tmp"
    unrelated.write_bytes(b"not ours")
    exporter = start_exporter(*args(fake_imds, state))
    exporter.wait_ready()
    assert [path.exists() for path in leftovers] == [not importing] * 2 and unrelated.exists()


def test_a_file_system_out_of_inodes_at_start_is_tolerated_like_a_full_disk(
    tmp_path: Path, fake_imds: FakeIMDS, start_exporter: StartExporter
) -> None:
    with small_tmpfs(tmp_path / "fs", size_kib=1024, inodes=8) as fs:
        for index in range(100):  # use every inode (the root directory holds one)
            try:
                (fs / f"f{index}").touch()
            except OSError:
                break
        fake_imds.respond = lambda seen: document(1, EVENT)
        exporter = start_exporter(*args(fake_imds, fs / "state.db"))
        exporter.wait_ready()
        assert (value(exporter.metrics(), ERRORS, file="state") or 0) >= 1
        assert exporter.stop() == 0
    stopping = [line for line in exporter.logs().splitlines() if "stopping with changes" in line]
    assert len(stopping) == 1 and f"not saved to state file {fs / 'state.db'} ([Errno 28]" in stopping[0], stopping
