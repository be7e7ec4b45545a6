"""The durable log spool: what survives a restart, what is sent once, what the bound drops; its records in
the state database, and an earlier release's journal imported once."""

from __future__ import annotations

import json
import os
import threading
import time
import tracemalloc
from pathlib import Path

import pytest

from se_exporter.audit.records import AttributeValue, AuditRecord
from se_exporter.audit.spool import Spool
from se_exporter.durable.schema import WAL_LIMIT_BYTES
from tests.support.state_file import finished_uids, on_disk, opened, spooled_records, writes_refused


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


def test_pending_records_survive_a_restart_in_order_and_acked_ones_never_return(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    with opened(path) as database:
        spool = Spool(database)
        assert spool.append([record(1), record(2), record(3)]) == 3
        spool.sync()  # the shipper has them written, on its own thread, before it ships
        assert [r["uid"] for r in spooled_records(path)] == ["uid-1", "uid-2", "uid-3"]
        spool.ack(["uid-1"])
        spool.close()  # as at SIGTERM: what the shipper had not had written is written then

    with opened(path) as database:
        again = Spool(database)
        assert uids(again.peek(10)) == ["uid-2", "uid-3"]
        assert again.peek(10)[0] == record(2), "attributes keep their types (tuple, int, bool) through the file"
        assert again.append([record(1), record(2)]) == 0, "re-emitted after a crash: recognised by uid"
        assert again.depth == 2


def test_a_record_is_shipped_only_once_written(tmp_path: Path) -> None:
    with opened(tmp_path / "state.json") as database:
        spool = Spool(database)
        spool.append([record(1)])
        assert spool.peek(10) == [], "not written yet: a crash now would lose it, so it is not sent"
        spool.sync()
        assert uids(spool.peek(10)) == ["uid-1"]
        spool.close()


def test_full_spool_drops_the_oldest_and_counts_them(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    with opened(path) as database:
        spool = Spool(database, capacity=3)
        spool.append([record(n) for n in range(1, 6)])
        spool.sync()
        assert uids(spool.peek(10)) == ["uid-3", "uid-4", "uid-5"]
        assert spool.dropped == 2
        spool.close()
    assert [r["uid"] for r in spooled_records(path)] == ["uid-3", "uid-4", "uid-5"], "the dropped never written"
    with opened(path) as database:
        assert uids(Spool(database, capacity=3).peek(10)) == ["uid-3", "uid-4", "uid-5"]


def test_acknowledged_records_leave_the_file_and_are_still_recognised(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    with opened(path) as database:
        spool = Spool(database)
        for n in range(3000):
            spool.append([record(n)])
            spool.sync()
            spool.ack([f"uid-{n}"])
        spool.append([record(5000)])
        spool.sync()
        assert path.stat().st_size < 1_000_000, "acknowledged records must not pile up in the file"
        assert on_disk(path) < 1_000_000 + WAL_LIMIT_BYTES + (1 << 20), "nor in its WAL"
        spool.close()
    assert [r["uid"] for r in spooled_records(path)] == ["uid-5000"]
    assert len(finished_uids(path)) == 3000
    with opened(path) as database:
        again = Spool(database)
        assert uids(again.peek(10)) == ["uid-5000"]
        assert again.append([record(2999)]) == 0
    if os.name == "posix":  # Windows has no such modes: there the directory's ACL decides (docs/windows.md)
        assert path.stat().st_mode & 0o077 == 0, "the state file holds what IMDS said of this VM: 0600"


def test_a_long_outage_of_the_disk_remembers_the_newest_delivered_records_not_every_one(tmp_path: Path) -> None:
    """The collector takes every record while no write of the state file works: what the next write will
    carry is bounded (the newest ``capacity`` uids never written, and the rows to delete), not a uid for
    each record of the whole outage."""
    path = tmp_path / "state.json"
    with opened(path) as database:
        spool = Spool(database, capacity=100)
        spool.append([record(0)])
        spool.sync()  # in the table before the outage
        with writes_refused(path):
            for n in range(1, 5001):
                spool.append([record(n)])
                spool.ack([f"uid-{n}"])
            spool.sync()
            assert spool.write_errors == 1 and not spool.synced
        spool.ack(["uid-0"])
        spool.sync()
        assert spool.synced
        spool.close()
    remembered = finished_uids(path)
    assert spooled_records(path) == [], "the record in the table before the outage is deleted once delivered"
    assert "uid-0" in remembered and "uid-5000" in remembered and "uid-1" not in remembered
    assert len(remembered) <= 1 + 2 * 100, len(remembered)
    with opened(path) as database:
        assert Spool(database).append([record(5000), record(0)]) == 0, "re-emitted after a crash: sent once"


def test_an_earlier_releases_journal_is_imported_once_torn_and_damaged_lines_skipped(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    journal = tmp_path / "state.json.spool"
    lines = [json.dumps({"add": record(n).to_json()}).encode() + b"\n" for n in (1, 2, 3)]
    lines.append(json.dumps({"ack": ["uid-3"]}).encode() + b"\n")
    journal.write_bytes(b"not json\n" + b"".join(lines) + b'{"add": {"event_na')  # a crash mid-write
    with opened(path) as database:
        spool = Spool(database)
        assert uids(spool.peek(10)) == ["uid-1", "uid-2"], "durable already: the journal stays until they are written"
        spool.sync()
        assert spool.append([record(3)]) == 0, "acknowledged in the journal: never sent again"
        spool.close()
    assert not journal.exists() and (tmp_path / "state.json.spool.imported").exists()
    assert [r["uid"] for r in spooled_records(path)] == ["uid-1", "uid-2"]
    with opened(path) as database:
        assert uids(Spool(database).peek(10)) == ["uid-1", "uid-2"], "imported once, kept in the database"


def test_without_a_state_file_the_spool_lives_in_memory(tmp_path: Path) -> None:
    spool = Spool(None, capacity=2)
    spool.append([record(1), record(2), record(3)])
    spool.sync()
    assert uids(spool.peek(10)) == ["uid-2", "uid-3"] and spool.dropped == 1
    assert list(tmp_path.iterdir()) == []


def test_wait_returns_when_records_arrive_and_never_blocks_after_wake() -> None:
    spool = Spool(None)
    arrived = threading.Event()

    def waiter() -> None:
        if spool.wait(timeout=30):
            arrived.set()

    thread = threading.Thread(target=waiter)
    thread.start()
    spool.append([record(1)])
    thread.join(10)
    assert arrived.is_set() and not thread.is_alive(), "append() wakes a waiting shipper"
    spool.ack(["uid-1"])
    spool.wake()  # the shipper is stopping; its next wait, even one that starts later, must not sleep
    began = time.monotonic()
    assert spool.wait(timeout=60) is False
    assert time.monotonic() - began < 30, "it slept its timeout"


def big(n: int, description_bytes: int) -> AuditRecord:
    attributes: dict[str, AttributeValue] = {
        "scheduled_event.id": f"E{n}",
        "scheduled_event.description": "d" * description_bytes,
    }
    return AuditRecord("scheduled_event.transition", "INFO", f"record {n}", attributes, n, f"uid-{n}")


def test_the_spool_is_bounded_in_bytes_of_memory_dropping_the_oldest_and_counting_them(tmp_path: Path) -> None:
    """A new event with a 3.5 MB Description at every poll once grew memory and the file without end."""
    path = tmp_path / "state.json"
    with opened(path) as database:
        spool = Spool(database, max_bytes=10 << 20)
        for n in range(20):
            spool.append([big(n, 3_500_000)])
            spool.sync()  # as the shipper does between two exports
            assert spool.pending_bytes <= 10 << 20
        assert uids(spool.peek(10)) == ["uid-18", "uid-19"] and spool.dropped == 18
        assert on_disk(path) < 3 * (10 << 20), "the file is bounded too"
        spool.close()
    with opened(path) as database:
        again = Spool(database, max_bytes=10 << 20)
        assert uids(again.peek(10)) == ["uid-18", "uid-19"] and again.dropped == 0


def test_while_the_disk_refuses_writes_the_records_waiting_are_held_once_within_the_bound(tmp_path: Path) -> None:
    """The bound counts the records; each one's JSON, made when it was appended, was held beside it until a
    write succeeded: twice the bound while the disk was full. It is made as it is written now."""
    bound = 2 << 20
    path = tmp_path / "state.json"
    with opened(path) as database:
        spool = Spool(database, max_bytes=bound)
        with writes_refused(path):
            tracemalloc.start()
            try:
                for n in range(60):  # 64 KiB each: about 30 are within the bound, the oldest dropped
                    spool.append([big(n, 64 << 10)])
                spool.sync()
                held = tracemalloc.get_traced_memory()[0]
            finally:
                tracemalloc.stop()
        assert spool.write_errors == 1 and spool.dropped > 0 and spool.pending_bytes <= bound
        assert held < bound * 1.25, f"{held / bound:.2f} times the bound held"
        spool.sync()
        assert spool.synced and len(spooled_records(path)) == spool.depth
        spool.close()


def test_a_journal_larger_than_the_bound_is_read_within_it_a_line_at_a_time(tmp_path: Path) -> None:
    """Another version's (or a larger bound's) spool: the newest records that fit are kept, the rest counted."""
    path = tmp_path / "state.json"
    with (tmp_path / "state.json.spool").open("wb") as journal:
        for n in range(40):
            journal.write(json.dumps({"add": big(n, 1_000_000).to_json()}).encode() + b"\n")
    with opened(path) as database:
        spool = Spool(database, max_bytes=4_500_000)
        assert spool.dropped == 36
        spool.sync()
        assert uids(spool.peek(10)) == ["uid-36", "uid-37", "uid-38", "uid-39"]
        spool.close()
    assert [r["uid"] for r in spooled_records(path)] == ["uid-36", "uid-37", "uid-38", "uid-39"]


@pytest.mark.skipif(os.name == "nt", reason="Windows has no FIFOs (os.mkfifo)")
def test_a_fifo_in_place_of_an_earlier_journal_does_not_hang_the_start(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "state.json.spool")
    with opened(tmp_path / "state.json") as database:
        spool = Spool(database)
        spool.append([record(1)])
        spool.sync()
        assert uids(spool.peek(10)) == ["uid-1"]
        spool.close()
