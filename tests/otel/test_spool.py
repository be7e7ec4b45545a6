"""The durable log spool: what survives a restart, what is sent once, what the bound drops."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from se_exporter.audit.records import AttributeValue, AuditRecord
from se_exporter.audit.spool import Spool


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
    path = tmp_path / "state.json.spool"
    spool = Spool(path)
    assert spool.append([record(1), record(2), record(3)]) == 3
    spool.sync()  # the shipper writes, on its own thread, before it ships
    spool.ack(["uid-1"])
    spool.close()  # as at SIGTERM: what the shipper had not written yet is written then

    again = Spool(path)
    assert uids(again.peek(10)) == ["uid-2", "uid-3"]
    assert again.peek(10)[0] == record(2), "attributes keep their types (tuple, int, bool) through the file"
    assert again.append([record(1), record(2)]) == 0, "re-emitted after a crash: recognised by uid"
    assert again.depth == 2


def test_full_spool_drops_the_oldest_and_counts_them(tmp_path: Path) -> None:
    path = tmp_path / "spool"
    spool = Spool(path, capacity=3)
    spool.append([record(n) for n in range(1, 6)])
    spool.sync()
    assert uids(spool.peek(10)) == ["uid-3", "uid-4", "uid-5"]
    assert spool.dropped == 2
    spool.close()
    assert uids(Spool(path, capacity=3).peek(10)) == ["uid-3", "uid-4", "uid-5"]


def test_torn_last_line_is_ignored_and_a_damaged_line_skipped(tmp_path: Path) -> None:
    path = tmp_path / "spool"
    spool = Spool(path)
    spool.append([record(1)])
    spool.append([record(2)])
    spool.close()
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"not json\n" + b"".join(lines) + b'{"add": {"event_na')  # a crash mid-write
    assert uids(Spool(path).peek(10)) == ["uid-1", "uid-2"]


def test_journal_is_compacted_and_still_deduplicates(tmp_path: Path) -> None:
    path = tmp_path / "spool"
    spool = Spool(path)
    for n in range(3000):
        spool.append([record(n)])
        spool.ack([f"uid-{n}"])
    spool.append([record(5000)])
    assert path.stat().st_size < 200_000, "acknowledged records must not pile up in the journal"
    spool.close()
    again = Spool(path)
    assert uids(again.peek(10)) == ["uid-5000"]
    assert again.append([record(2999)]) == 0
    assert all(json.loads(line) for line in path.read_bytes().splitlines())
    if os.name == "posix":  # Windows has no such modes: there the directory's ACL decides (docs/windows.md)
        assert path.stat().st_mode & 0o077 == 0, "the spool holds the same data as the state file: 0600"


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
    path = tmp_path / "spool"
    spool = Spool(path, max_bytes=10 << 20)
    for n in range(20):
        spool.append([big(n, 3_500_000)])
        spool.sync()  # as the shipper does between two exports
        assert spool.pending_bytes <= 10 << 20
    assert uids(spool.peek(10)) == ["uid-18", "uid-19"] and spool.dropped == 18
    assert path.stat().st_size < 3 * (10 << 20), "the journal is bounded too"
    spool.close()
    again = Spool(path, max_bytes=10 << 20)
    assert uids(again.peek(10)) == ["uid-18", "uid-19"] and again.dropped == 0


def test_a_journal_larger_than_the_bound_replays_within_it_a_line_at_a_time(tmp_path: Path) -> None:
    """Another version's (or a larger bound's) spool: the newest records that fit are kept, the rest counted."""
    path = tmp_path / "spool"
    with path.open("wb") as journal:
        for n in range(40):
            journal.write(json.dumps({"add": big(n, 1_000_000).to_json()}).encode() + b"\n")
    spool = Spool(path, max_bytes=4_500_000)
    assert uids(spool.peek(10)) == ["uid-36", "uid-37", "uid-38", "uid-39"]
    assert spool.dropped == 36 and path.stat().st_size < 4_500_000


@pytest.mark.skipif(os.name == "nt", reason="Windows has no FIFOs (os.mkfifo)")
def test_a_fifo_in_place_of_the_journal_does_not_hang_the_start(tmp_path: Path) -> None:
    path = tmp_path / "spool"
    os.mkfifo(path)
    spool = Spool(path)
    spool.append([record(1)])
    spool.sync()
    assert path.is_file() and uids(Spool(path).peek(10)) == ["uid-1"]
