"""The durable log spool (``se_exporter/durable/spool.py``): its table is its truth. What survives a restart,
what is shipped and when, what the bounds drop; an earlier release's journal imported once."""

from __future__ import annotations

import json
import os
import threading
import time
import tracemalloc
from pathlib import Path

import msgspec
import pytest

from se_exporter.audit.records import AttributeValue, AuditRecord
from se_exporter.durable.opening import open_memory_database
from se_exporter.durable.schema import WAL_LIMIT_BYTES
from tests.support.state_file import audit_spool, commit, on_disk, opened, spooled_records, writes_refused
from tests.support.wait import wait_for


def record(n: int) -> AuditRecord:
    attributes: dict[str, AttributeValue] = {
        "scheduled_event.id": f"E{n}",
        "scheduled_event.resources": ("vm-a", "vm-b"),
        "scheduled_event.document_incarnation": n,
        "scheduled_event.affects_this_vm": True,
    }
    return AuditRecord(
        "scheduled_event.transition", "INFO", f"record {n}", attributes, 1_700_000_000_000_000_000 + n, f"uid-{n}"
    )


def uids(records: list[AuditRecord]) -> list[str]:
    return [r.uid for r in records]


def journal_line(entry: object) -> bytes:
    return json.dumps(msgspec.to_builtins(entry)).encode() + b"\n"


def test_pending_records_survive_a_restart_in_order_and_acked_ones_never_return(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    with opened(path) as database:
        spool = audit_spool(database)
        assert spool.append([record(1), record(2), record(3)]) == 3
        commit(database)
        assert [r["uid"] for r in spooled_records(path)] == ["uid-1", "uid-2", "uid-3"]
        spool.ack(["uid-1"])
        assert uids(spool.peek(10)) == ["uid-2", "uid-3"], "acknowledged: never peeked again"
        wait_for(lambda: len(spooled_records(path)) == 2, 30, "the acknowledgement's delete committed")
        spool.close()

    with opened(path) as database:
        again = audit_spool(database)
        assert uids(again.peek(10)) == ["uid-2", "uid-3"]
        assert again.peek(10)[0] == record(2), "attributes keep their types (tuple, int, bool) through the file"
        assert again.depth == 2


def test_a_record_is_shipped_only_once_committed_with_the_next_submit(tmp_path: Path) -> None:
    """A record goes into the transaction of the submit after it (the poll's rows): never before them, so a
    crash keeps both or neither. Until that commit it is not shipped: a crash now would lose it."""
    path = tmp_path / "state.db"
    with opened(path) as database:
        spool = audit_spool(database)
        spool.append([record(1)])
        database.sync(30)  # a commit without a submit (an acknowledgement's) does not carry it
        assert spool.peek(10) == [] and spooled_records(path) == [] and spool.depth == 1
        commit(database)
        assert uids(spool.peek(10)) == ["uid-1"]
        spool.close()


def test_a_full_table_drops_the_oldest_and_counts_them(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    with opened(path) as database:
        spool = audit_spool(database, capacity=3)
        spool.append([record(n) for n in range(1, 3)])
        commit(database)
        spool.append([record(n) for n in range(3, 6)])
        commit(database)
        assert uids(spool.peek(10)) == ["uid-3", "uid-4", "uid-5"]
        assert spool.dropped == 2 and spool.depth == 3
        spool.close()
    assert [r["uid"] for r in spooled_records(path)] == ["uid-3", "uid-4", "uid-5"]
    with opened(path) as database:
        assert uids(audit_spool(database, capacity=3).peek(10)) == ["uid-3", "uid-4", "uid-5"]


def test_acknowledged_records_leave_the_file(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    with opened(path) as database:
        spool = audit_spool(database)
        for n in range(3000):
            spool.append([record(n)])
            commit(database)
            spool.ack([f"uid-{n}"])
        spool.append([record(5000)])
        commit(database)
        assert path.stat().st_size < 1_000_000, "acknowledged records must not pile up in the file"
        assert on_disk(path) < 1_000_000 + WAL_LIMIT_BYTES + (1 << 20), "nor in its WAL"
        spool.close()
    assert [r["uid"] for r in spooled_records(path)] == ["uid-5000"]
    if os.name == "posix":  # Windows has no such modes: there the directory's ACL decides (docs/windows.md)
        assert path.stat().st_mode & 0o077 == 0, "the state file holds what IMDS said of this VM: 0600"


def test_an_earlier_releases_journal_is_imported_once_torn_and_damaged_lines_skipped(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    journal = tmp_path / "state.db.spool"
    lines = [journal_line({"add": record(n)}) for n in (1, 2, 3)]
    lines.append(journal_line({"ack": ["uid-3"]}))
    journal.write_bytes(b"not json\n" + b"".join(lines) + b'{"add": {"event_na')  # a crash mid-write
    with opened(path) as database:
        spool = audit_spool(database)
        assert uids(spool.peek(10)) == ["uid-1", "uid-2"], "acknowledged in the journal: not imported"
        spool.close()
    assert not journal.exists() and (tmp_path / "state.db.spool.imported").exists()
    assert [r["uid"] for r in spooled_records(path)] == ["uid-1", "uid-2"]
    with opened(path) as database:
        assert uids(audit_spool(database).peek(10)) == ["uid-1", "uid-2"], "imported once, kept in the database"


def test_without_a_state_file_the_spool_lives_in_memory(tmp_path: Path) -> None:
    database = open_memory_database()
    spool = audit_spool(database, capacity=2)
    spool.append([record(1), record(2), record(3)])
    commit(database)
    assert uids(spool.peek(10)) == ["uid-2", "uid-3"] and spool.dropped == 1
    assert list(tmp_path.iterdir()) == []
    database.close(10)


def test_wait_returns_once_records_are_committed_and_never_blocks_after_wake() -> None:
    database = open_memory_database()
    spool = audit_spool(database)
    arrived = threading.Event()

    def waiter() -> None:
        if spool.wait(timeout=30):
            arrived.set()

    thread = threading.Thread(target=waiter)
    thread.start()
    spool.append([record(1)])
    commit(database)
    thread.join(10)
    assert arrived.is_set() and not thread.is_alive(), "a commit that inserts wakes a waiting shipper"
    spool.ack(["uid-1"])
    spool.wake()  # the shipper is stopping; its next wait, even one that starts later, must not sleep
    began = time.monotonic()
    assert spool.wait(timeout=60) is False
    assert time.monotonic() - began < 30, "it slept its timeout"
    database.close(10)


def big(n: int, description_bytes: int) -> AuditRecord:
    attributes: dict[str, AttributeValue] = {
        "scheduled_event.id": f"E{n}",
        "scheduled_event.description": "d" * description_bytes,
    }
    return AuditRecord("scheduled_event.transition", "INFO", f"record {n}", attributes, n, f"uid-{n}")


def test_the_spool_is_bounded_in_bytes_dropping_the_oldest_and_counting_them(tmp_path: Path) -> None:
    """A new event with a 3.5 MB Description at every poll once grew memory and the file without end."""
    path = tmp_path / "state.db"
    with opened(path) as database:
        spool = audit_spool(database, max_bytes=10 << 20)
        for n in range(20):
            spool.append([big(n, 3_500_000)])
            commit(database)
        assert uids(spool.peek(10)) == ["uid-18", "uid-19"] and spool.dropped == 18
        assert uids(spool.peek(10, max_bytes=1)) == ["uid-18"], "a peek reads what its bytes allow, one at least"
        assert on_disk(path) < 3 * (10 << 20), "the file is bounded too"
        spool.close()
    with opened(path) as database:
        again = audit_spool(database, max_bytes=10 << 20)
        assert uids(again.peek(10)) == ["uid-18", "uid-19"] and again.dropped == 0


def test_while_the_disk_refuses_writes_the_records_waiting_are_held_once_within_the_bound(tmp_path: Path) -> None:
    """Records no commit carried are held in memory as their JSON, once, within the bound."""
    bound = 2 << 20
    path = tmp_path / "state.db"
    with opened(path) as database:
        spool = audit_spool(database, max_bytes=bound)
        with writes_refused(path):
            tracemalloc.start()
            try:
                for n in range(60):  # 64 KiB each: about 30 are within the bound, the oldest dropped
                    spool.append([big(n, 64 << 10)])
                commit(database)
                held = tracemalloc.get_traced_memory()[0]
            finally:
                tracemalloc.stop()
            assert spool.write_errors >= 1 and spool.dropped > 0 and not spool.synced
            assert spool.peek(10) == [], "nothing committed: nothing shipped"
        assert held < bound * 1.25, f"{held / bound:.2f} times the bound held"
        commit(database)
        assert spool.synced and len(spooled_records(path)) == spool.depth == 60 - spool.dropped
        spool.close()


def test_a_journal_larger_than_the_bound_is_read_within_it_a_line_at_a_time(tmp_path: Path) -> None:
    """Another version's (or a larger bound's) spool: the newest records that fit are kept."""
    path = tmp_path / "state.db"
    with (tmp_path / "state.db.spool").open("wb") as journal:
        for n in range(40):
            journal.write(journal_line({"add": big(n, 1_000_000)}))
    with opened(path) as database:
        spool = audit_spool(database, max_bytes=4_500_000)
        assert uids(spool.peek(10)) == ["uid-36", "uid-37", "uid-38", "uid-39"]
        spool.close()
    assert [r["uid"] for r in spooled_records(path)] == ["uid-36", "uid-37", "uid-38", "uid-39"]


@pytest.mark.skipif(os.name == "nt", reason="Windows has no FIFOs (os.mkfifo)")
def test_a_fifo_in_place_of_an_earlier_journal_does_not_hang_the_start(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "state.db.spool")
    with opened(tmp_path / "state.db") as database:
        spool = audit_spool(database)
        spool.append([record(1)])
        commit(database)
        assert uids(spool.peek(10)) == ["uid-1"]
        spool.close()
