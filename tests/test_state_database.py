"""The state file's sections on disk (``se_exporter/state/persistence.py``, ``state/database.py``): a save writes
the sections whose component changed and no other, and a failed write loses none of them to a newer one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from se_exporter.state.persistence import Persistence
from tests.support.state_file import opened, saved_sections, section_rowids, writes_refused
from tests.support.wait import wait_for


class Component:
    """A stateful component: what it saves, and a version that moves with it."""

    def __init__(self, state: Any) -> None:
        self.state, self.state_version = state, 0

    def change(self, state: Any) -> None:
        self.state, self.state_version = state, self.state_version + 1

    def to_state(self) -> Any:
        return self.state


@pytest.fixture
def persistence(tmp_path: Path) -> Any:
    saving = Persistence(tmp_path / "state.db")
    yield saving
    saving.close()


@pytest.mark.parametrize(
    ("changed", "force", "written"),
    [
        ((), True, {"events", "approvals"}),  # at start: the restored state, as it will be saved from now on
        (("approvals",), False, {"approvals"}),  # an approval at 1,000 events: not the event store again
        (("events", "approvals"), False, {"events", "approvals"}),
        (("approvals",), True, {"events", "approvals"}),
    ],
)
def test_a_save_writes_the_sections_whose_component_changed(
    persistence: Persistence, tmp_path: Path, changed: tuple[str, ...], force: bool, written: set[str]
) -> None:
    components = {"events": Component({"events": ["E1"] * 100}), "approvals": Component({"approved": []})}
    for name, component in components.items():
        persistence.track(name, component)
    assert persistence.save()
    before = section_rowids(tmp_path / "state.db")

    for name in changed:
        components[name].change({"changed": name})
    generation = persistence.next_generation
    persistence.flush(force=force)
    assert persistence.wait_durable(generation, 30)

    after = section_rowids(tmp_path / "state.db")
    assert {name for name in after if after[name] != before[name]} == written
    assert saved_sections(tmp_path / "state.db") == {name: c.state for name, c in components.items()}


def test_a_section_no_longer_kept_is_deleted(persistence: Persistence, tmp_path: Path) -> None:
    with opened(tmp_path / "other.db") as database:
        database.submit(1, {"events": b"[1]", "gone": b"[2]"}, ("events", "gone"))
        database.submit(2, {"events": b"[3]"}, ("events",))
        assert database.wait_durable(2, 30)
    assert saved_sections(tmp_path / "other.db") == {"events": [3]}


def test_a_failed_write_is_carried_by_the_snapshot_waiting_after_it(tmp_path: Path) -> None:
    """Generation 2 (approvals changed) fails, held out by another writer (an operator's sqlite3 shell);
    generation 3 (events changed), handed over meanwhile, must carry generation 2's approvals: once 3 is
    durable, so is 2, and an approval waiting on it may be posted."""
    path = tmp_path / "state.db"
    failures: list[tuple[int | None, str]] = []
    with opened(path) as database:
        database.on_commit = lambda generation, _spool, _seconds, failure: (
            failures.append((generation, str(failure))) if failure else None
        )
        database.submit(1, {"events": b"[1]", "approvals": b"[1]"}, ("events", "approvals"))
        assert database.wait_durable(1, 30)
        with writes_refused(path):
            database.submit(2, {"approvals": b"[2]"}, ("events", "approvals"))
            wait_for(lambda: database.in_flight == 2, 10, "the writer on generation 2")
            database.submit(3, {"events": b"[3]"}, ("events", "approvals"))
            wait_for(lambda: failures, 30, "generation 2 failing")
        assert failures[0][0] == 2 and "locked" in failures[0][1], failures
        assert database.wait_durable(3, 30)
    assert saved_sections(path) == {"events": [3], "approvals": [2]}


def test_a_section_no_component_restored_is_let_go_and_deleted_at_the_first_full_save(tmp_path: Path) -> None:
    """Lifecycle spans saved by a run with OTLP on, read by a run with it off: no component takes that
    section, so the start's full save deletes it, and its JSON is not kept in memory for the run."""
    path = tmp_path / "state.db"
    with opened(path) as database:
        database.submit(1, {"events": b'{"events": []}', "lifecycle": b'{"open": []}'}, ("events", "lifecycle"))
        assert database.wait_durable(1, 30)
    saving = Persistence(path)
    try:
        events = saving.restore("events", lambda section: Component(section), lambda: Component(None))
        saving.track("events", events)
        assert saving.section("lifecycle") is not None, "read at start"
        assert saving.save()  # the start's full save, every component restored by then
        assert saving.section("lifecycle") is None and saving.section("events") is None
    finally:
        saving.close()
    assert set(saved_sections(path)) == {"events"}
