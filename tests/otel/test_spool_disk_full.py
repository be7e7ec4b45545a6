"""The spool on a real, full file system (a small tmpfs): nothing is lost if space comes back before
the process ends, every failed write is counted, and the shutdown line tells the truth."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from se_exporter.audit.records import AuditRecord
from se_exporter.audit.spool import Spool
from tests.support.tmpfs import fill, small_tmpfs

pytestmark = pytest.mark.posix


def record(n: int) -> AuditRecord:
    return AuditRecord(
        "scheduled_event.transition",
        "INFO",
        f"record {n} " + "x" * 400,
        {"scheduled_event.id": f"E{n}"},
        1_750_000_000_000_000_000 + n,
        f"uid-{n}",
    )


@pytest.mark.parametrize("space_back_before", ["the next append", "close"])
def test_records_appended_while_the_disk_is_full_reach_the_file_once_space_is_back(
    tmp_path: Path, space_back_before: str
) -> None:
    with small_tmpfs(tmp_path / "fs") as fs:
        spool = Spool(fs / "spool")
        spool.append([record(n) for n in range(10)])
        spool.sync()  # the shipper writes between its exports
        filler = fill(fs)
        for n in range(10, 80):
            spool.append([record(n)])
            spool.sync()
        assert spool.write_errors > 0 and not spool.synced
        filler.unlink()
        if space_back_before == "the next append":
            spool.append([record(80)])
            spool.sync()
            assert spool.synced
        spool.close()
        reopened = Spool(fs / "spool")
        expected = 81 if space_back_before == "the next append" else 80
        assert reopened.depth == expected
        assert [r.uid for r in reopened.peek(expected)] == [f"uid-{n}" for n in range(expected)]


def test_a_disk_still_full_at_close_is_said_at_close(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="se_exporter")
    with small_tmpfs(tmp_path / "fs") as fs:
        spool = Spool(fs / "spool")
        fill(fs)
        spool.append([record(1)])
        spool.sync()
        spool.close()
        assert not spool.synced and spool.write_errors >= 2  # the append, then the rewrite at close
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "records are kept in memory and written once it works again" in errors[0]


def test_a_damaged_line_with_an_out_of_range_number_is_skipped(tmp_path: Path) -> None:
    """ "timestamp_ns": 1e999 once crashed the start (a crash loop)."""
    path = tmp_path / "spool"
    good = Spool(path)
    good.append([record(1), record(2)])
    good.close()
    lines = path.read_bytes().splitlines()
    damaged = lines[0].replace(b'"timestamp_ns":1750000000000000001', b'"timestamp_ns":1e999')
    assert damaged != lines[0]
    path.write_bytes(b"\n".join([damaged, *lines[1:]]) + b"\n")
    assert [r.uid for r in Spool(path).peek(10)] == ["uid-2"]
