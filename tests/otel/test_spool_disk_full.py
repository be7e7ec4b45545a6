"""The spool on a real, full file system (a small tmpfs): nothing is lost if space comes back before
the process ends, every failed write is counted, and the shutdown line tells the truth."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import pytest

from se_exporter.audit.records import AuditRecord
from tests.support.state_file import audit_spool, commit, opened
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
        with opened(fs / "state.db") as database:
            spool = audit_spool(database)
            spool.append([record(n) for n in range(10)])
            commit(database)  # a poll's transaction
            filler = fill(fs)
            for n in range(10, 80):
                spool.append([record(n)])
                commit(database)
            assert spool.write_errors > 0 and not spool.synced
            filler.unlink()
            if space_back_before == "the next append":
                spool.append([record(80)])
                commit(database)
                assert spool.synced
            spool.close()
        with opened(fs / "state.db") as database:
            reopened = audit_spool(database)
            expected = 81 if space_back_before == "the next append" else 80
            assert reopened.depth == expected
            assert [r.uid for r in reopened.peek(expected)] == [f"uid-{n}" for n in range(expected)]


def test_a_disk_still_full_at_close_is_said_at_close(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="se_exporter")
    with small_tmpfs(tmp_path / "fs") as fs, opened(fs / "state.db") as database:
        spool = audit_spool(database)
        fill(fs)
        spool.append([record(1)])
        commit(database)
        commit(database)
        spool.close()
        assert not spool.synced and spool.write_errors >= 2  # each commit tried
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "records wait in memory until it works again" in errors[0]


def test_a_damaged_record_with_an_out_of_range_number_is_skipped(tmp_path: Path) -> None:
    """ "timestamp_ns": 1e999 once crashed the start (a crash loop)."""
    path = tmp_path / "state.db"
    with opened(path) as database:
        good = audit_spool(database)
        good.append([record(1), record(2)])
        commit(database)
        good.close()
    connection = sqlite3.connect(path)
    with connection:
        (body,) = connection.execute("SELECT body FROM spool WHERE uid = 'uid-1'").fetchone()
        damaged = body.replace(b'"timestamp_ns":1750000000000000001', b'"timestamp_ns":1e999')
        assert damaged != body
        connection.execute("UPDATE spool SET body = ? WHERE uid = 'uid-1'", (damaged,))
    connection.close()
    with opened(path) as database:
        spool = audit_spool(database)
        assert [r.uid for r in spool.peek(10)] == ["uid-2"]
        assert spool.dropped == 1, "set aside, counted"
        spool.close()
