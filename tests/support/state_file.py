"""What the exporter saved in its state file (the sqlite database, ``se_exporter/durable/schema.py``), read
as an operator would with sqlite: a read-only connection beside the running exporter; and a component's
rows as the state file would hold them (``encoded``, ``as_json``)."""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec

from se_exporter.audit.records import AuditRecord, decode_record, encode_record
from se_exporter.durable.database import Database
from se_exporter.durable.opening import open_database
from se_exporter.durable.persistence import MAX_DATABASE_BYTES, Stateful, Tables
from se_exporter.durable.schema import COMPONENT_TABLES
from se_exporter.durable.spool import DEFAULT_CAPACITY, DEFAULT_MAX_BYTES, Spool


def _read(path: Path, query: str) -> list[tuple[Any, ...]]:
    connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
    try:
        return connection.execute(query).fetchall()
    finally:
        connection.close()


def saved_rows(path: Path) -> dict[str, dict[str, Any]]:
    """Every component table's rows (table -> key -> decoded body), tables without rows left out; {} while
    the file does not exist yet."""
    if not path.exists():
        return {}
    saved: dict[str, dict[str, Any]] = {}
    for table in COMPONENT_TABLES:
        for key, body in _read(path, f"SELECT key, body FROM {table}"):
            saved.setdefault(table, {})[str(key)] = json.loads(body)
    return saved


def row_ids(path: Path, table: str) -> dict[str, int]:
    """Each row's rowid: a row written again gets a new one."""
    return {str(key): int(rowid) for key, rowid in _read(path, f"SELECT key, rowid FROM {table}")}


def saved_event_ids(path: Path) -> list[str]:
    """The EventIds of the event store's rows, in the order they were first seen; [] while nothing is saved."""
    events = saved_rows(path).get("events", {})
    return sorted(events, key=lambda key: events[key]["first_seen"])


def encoded(component: Stateful) -> Tables:
    """``component``'s rows as the state file holds them (what its ``from_rows`` reads back)."""
    return {
        table: {key: msgspec.json.encode(value) for key, value in rows.items()}
        for table, rows in component.rows().items()
    }


def as_json(component: Stateful) -> dict[str, dict[str, Any]]:
    """``component``'s rows, each decoded from its JSON."""
    return {table: {key: json.loads(body) for key, body in rows.items()} for table, rows in encoded(component).items()}


def spooled_records(path: Path) -> list[dict[str, Any]]:
    """The log records waiting in the spool, oldest first."""
    if not path.exists():
        return []
    return [json.loads(body) for (body,) in _read(path, "SELECT body FROM spool ORDER BY seq")]


def audit_spool(
    database: Database, capacity: int = DEFAULT_CAPACITY, max_bytes: int = DEFAULT_MAX_BYTES
) -> Spool[AuditRecord]:
    """The OTLP log spool on ``database``, as the exporter's pipeline makes it."""
    return database.spool(encode=encode_record, decode=decode_record, capacity=capacity, max_bytes=max_bytes)


def commit(database: Database) -> None:
    """What a poll's flush does for the spool: what it staged goes into a transaction, committed now."""
    database.submit({})
    database.sync(30)


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
