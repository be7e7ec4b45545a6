"""The state file's rows on disk (``se_exporter/durable/persistence.py``, ``durable/database.py``,
``durable/schema.py``): a save writes the rows that changed and no other, a component that is off keeps its
rows, a failed write is never reported durable, and the schema version decides what is opened."""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Iterator, Mapping
from concurrent.futures import Future
from pathlib import Path

import pytest

from se_exporter.durable.persistence import Persistence, Tables
from se_exporter.durable.schema import LATEST, TooNew
from tests.support.state_file import opened, row_ids, saved_rows, writes_refused
from tests.support.tmpfs import fill, small_tmpfs
from tests.support.wait import wait_for


class Component:
    """A stateful component: its rows (table -> key -> value), and a version that moves with them."""

    def __init__(self, rows: dict[str, dict[str, object]]) -> None:
        self.state, self.state_version = rows, 0

    @classmethod
    def restored(cls, tables: Tables) -> Component:
        return cls({table: {key: json.loads(body) for key, body in rows.items()} for table, rows in tables.items()})

    def change(self, table: str, key: str, value: object | None) -> None:
        if value is None:
            del self.state[table][key]
        else:
            self.state.setdefault(table, {})[key] = value
        self.state_version += 1

    def rows(self) -> Mapping[str, Mapping[str, object]]:
        return self.state


@pytest.fixture
def persistence(tmp_path: Path) -> Iterator[Persistence]:
    saving = Persistence(tmp_path / "state.db")
    yield saving
    saving.close()


def events(count: int) -> dict[str, object]:
    return {f"E{n:04d}": {"event": f"E{n:04d}", "payload": "x" * 200} for n in range(count)}


@pytest.mark.parametrize(
    ("change", "written"),
    [
        (("events", "E0007", {"event": "E0007", "payload": "new"}), {"E0007"}),  # one of 1,000: that row alone
        (("events", "E0007", None), set()),  # deleted: no other row written
        (("events", "E1000", {"event": "E1000"}), {"E1000"}),  # a new event: its row alone
        (("events", "E0007", {"event": "E0007", "payload": "x" * 200}), set()),  # the same body: nothing written
    ],
)
def test_a_save_writes_the_rows_that_changed_and_no_other(
    persistence: Persistence, tmp_path: Path, change: tuple[str, str, object | None], written: set[str]
) -> None:
    store = Component({"events": events(1000)})
    persistence.track("store", store, ("events",))
    assert persistence.save(10)
    before = row_ids(tmp_path / "state.db", "events")

    store.change(*change)
    persistence.flush().result(30)

    after = row_ids(tmp_path / "state.db", "events")
    assert {key for key in after if after[key] != before.get(key)} == written
    assert saved_rows(tmp_path / "state.db")["events"] == store.state["events"]


def test_the_rows_of_a_component_off_in_this_run_stay_untouched(tmp_path: Path) -> None:
    """Issue 64: a run without --approval.config once deleted the ledger, and the next run with the policy
    approved the same event again."""
    path = tmp_path / "state.db"
    first = Persistence(path)
    first.track("store", Component({"events": events(2)}), ("events",))
    first.track("approvals", Component({"approvals": {"E0000": {"status": "approved"}}}), ("approvals",))
    assert first.save(10)
    first.close()

    second = Persistence(path)  # the approver is off in this run
    store = second.restore("store", ("events",), Component.restored, lambda: Component({}))
    second.track("store", store, ("events",))
    store.change("events", "E0000", None)
    assert second.save(10)
    second.close()

    assert saved_rows(path) == {"events": {"E0001": events(2)["E0001"]}, "approvals": {"E0000": {"status": "approved"}}}


def test_a_failed_write_is_never_reported_durable_and_is_carried_by_the_next_commit(tmp_path: Path) -> None:
    """A commit refused (an operator's sqlite3 shell holds the write lock): its future stays pending, rows
    handed over meanwhile do not complete it, and the commit that finally carries it completes both."""
    path = tmp_path / "state.db"
    failures: list[str] = []
    with opened(path) as database:
        database.on_commit = lambda _rows, _spool, _seconds, failure: failures.append(str(failure)) if failure else None
        database.submit({"events": {"E1": b"[1]"}, "approvals": {"E1": b"[1]"}}).result(30)
        with writes_refused(path):
            approval = database.submit({"approvals": {"E1": b"[2]"}})
            wait_for(lambda: failures, 30, "the approval's commit failing")
            events_only: Future[None] = database.submit({"events": {"E1": b"[3]"}})
            assert not approval.done() and not events_only.done(), "nothing is durable while the lock is held"
        assert "locked" in failures[0], failures
        approval.result(30)
        events_only.result(30)
    assert saved_rows(path) == {"events": {"E1": [3]}, "approvals": {"E1": [2]}}


@pytest.mark.posix
@pytest.mark.parametrize("space_back", [False, True])
def test_a_stop_tries_a_failing_disk_once_more_and_says_what_it_did_not_take(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, space_back: bool
) -> None:
    """A full disk at stop: one last commit, not a retry for the whole wait (a service manager would kill
    the process meanwhile), and one error line when it failed too; when space came back, that commit
    carries everything, and nothing is said."""
    caplog.set_level(logging.INFO, logger="se_exporter")
    with small_tmpfs(tmp_path / "fs") as fs:
        path = fs / "state.db"
        saving = Persistence(path)
        component = Component({"events": {"E1": 1}})
        saving.track("store", component, ("events",))
        assert saving.save(10)
        filler = fill(fs)
        component.change("events", "E1", 2)
        component.change("events", "E2", "x" * 20_000)  # more than the pages sqlite may still have free
        pending = saving.flush()
        wait_for(lambda: not saving.ok, 30, "the commit failing on the full disk")
        if space_back:
            filler.unlink()
        saving.close()
        errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        if space_back:
            assert pending.done() and not pending.cancelled()
            assert saved_rows(path) == {"events": {"E1": 2, "E2": "x" * 20_000}}
            assert not [e for e in errors if e.startswith("stopping")], errors
        else:
            assert pending.cancelled(), "never reported durable"
            assert saved_rows(path) == {"events": {"E1": 1}}
            assert [e for e in errors if e.startswith("stopping")] == [
                f"stopping with changes not saved to state file {path} (database or disk is full): the "
                "next start resumes from what it holds and finds the transitions since again"
            ], errors


def test_rows_no_component_can_read_are_counted_and_deleted_once_that_component_is_on(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    with opened(path) as database:
        database.submit({"open_spans": {"E1": b"not json"}, "approvals": {"E1": b"[1]"}}).result(30)

    def refuse(_tables: Tables) -> Component:
        raise ValueError("damaged")

    saving = Persistence(path)
    spans = saving.restore("lifecycle", ("open_spans",), refuse, lambda: Component({}))
    saving.track("lifecycle", spans, ("open_spans",))
    assert saving.errors == 1
    assert saving.save(10)
    saving.close()
    assert saved_rows(path) == {"approvals": {"E1": [1]}}, "the approvals, off, untouched"


def test_a_database_of_a_newer_release_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    with opened(path) as database:
        database.submit({"events": {"E1": b"[1]"}}).result(30)
    connection = sqlite3.connect(path)
    connection.execute(f"PRAGMA user_version = {LATEST + 1}")
    connection.close()
    before = path.read_bytes()
    with pytest.raises(TooNew, match=f"schema version {LATEST + 1}, newer than {LATEST}"):
        Persistence(path)
    assert path.read_bytes() == before
    Persistence(tmp_path / "other.db").close()  # the lock was released: nothing else is held


def test_the_development_database_of_0_2_is_migrated_to_rows_in_one_step(tmp_path: Path) -> None:
    """Schema version 1 (one ``sections`` row per component) becomes rows, user_version 2."""
    path = tmp_path / "state.db"
    connection = sqlite3.connect(path)
    connection.executescript(
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
        "CREATE TABLE sections (name TEXT PRIMARY KEY, body BLOB NOT NULL);"
        "CREATE TABLE spool (seq INTEGER PRIMARY KEY, uid TEXT NOT NULL UNIQUE, body BLOB NOT NULL);"
        "CREATE TABLE finished (seq INTEGER PRIMARY KEY, uid TEXT NOT NULL UNIQUE);"
        "INSERT INTO meta VALUES ('schema', '1');"
    )
    approvals = {"version": 1, "policy": "p", "events": {"E1": {"status": "approved"}}}
    store = {"incarnation": 3, "events": [{"event": {"event_id": "E2"}}], "removed": {"E9": 2}, "last_look": 5.0}
    with connection:
        connection.execute("INSERT INTO sections VALUES ('approvals', ?)", (json.dumps(approvals),))
        connection.execute("INSERT INTO sections VALUES ('store', ?)", (json.dumps(store),))
        connection.execute("INSERT INTO spool (uid, body) VALUES ('u1', '{}')")
    connection.close()

    Persistence(path).close()

    assert saved_rows(path) == {
        "approvals": {"E1": {"status": "approved", "policy": "p"}},
        "events": {"E2": {"event": {"event_id": "E2"}}},
        "removed_events": {"E9": {"life": 2, "kind": "removed", "at": 5.0}},
        "event_store": {"store": {"incarnation": 3, "last_look": 5.0}},
    }
    check = sqlite3.connect(path)
    assert check.execute("PRAGMA user_version").fetchone()[0] == LATEST
    assert check.execute("SELECT uid FROM spool").fetchall() == [("u1",)], "the spool's records kept"
    tables = {name for (name,) in check.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    check.close()
    assert "sections" not in tables and "meta" not in tables
