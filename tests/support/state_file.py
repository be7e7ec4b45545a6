"""What the exporter saved in its state file (the sqlite database, ``se_exporter/state/database.py``), read
as an operator would with sqlite: a read-only connection beside the running exporter."""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from se_exporter.state.database import Database
from se_exporter.state.loading import open_database
from se_exporter.state.persistence import MAX_DATABASE_BYTES


def _read(path: Path, query: str) -> list[tuple[Any, ...]]:
    connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
    try:
        return connection.execute(query).fetchall()
    finally:
        connection.close()


def saved_sections(path: Path) -> dict[str, Any]:
    """Every section, decoded; {} while the file does not exist yet."""
    if not path.exists():
        return {}
    return {str(name): json.loads(body) for name, body in _read(path, "SELECT name, body FROM sections")}


def section_rowids(path: Path) -> dict[str, int]:
    """Each section's rowid: a section written again gets a new one."""
    return {str(name): int(rowid) for name, rowid in _read(path, "SELECT name, rowid FROM sections")}


def saved_event_ids(path: Path) -> list[str]:
    """The EventIds of the event store's section, in its order; [] while nothing is saved."""
    sections = saved_sections(path)
    return [event["event"]["event_id"] for event in sections["store"]["events"]] if "store" in sections else []


def spooled_records(path: Path) -> list[dict[str, Any]]:
    """The log records waiting in the spool, oldest first."""
    if not path.exists():
        return []
    return [json.loads(body) for (body,) in _read(path, "SELECT body FROM spool ORDER BY seq")]


def finished_uids(path: Path) -> list[str]:
    return [str(uid) for (uid,) in _read(path, "SELECT uid FROM finished ORDER BY seq")]


@contextlib.contextmanager
def opened(path: Path) -> Iterator[Database]:
    """The state database at ``path``, as the exporter opens it, closed (its writer stopped) after."""
    database = open_database(path, MAX_DATABASE_BYTES).database
    try:
        yield database
    finally:
        database.close(10)


@contextlib.contextmanager
def writes_refused(path: Path) -> Iterator[None]:
    """Every write of the database at ``path`` fails while the block runs: another connection (an operator's
    sqlite3 shell) holds the write lock, so the writer waits its busy timeout, then gives up."""
    shell = sqlite3.connect(path, isolation_level=None)
    shell.execute("BEGIN IMMEDIATE")
    try:
        yield
    finally:
        shell.rollback()
        shell.close()


def on_disk(path: Path) -> int:
    """The bytes of the database and its WAL."""
    return sum(p.stat().st_size for p in (path, path.with_name(path.name + "-wal")) if p.exists())
