"""The state database's tables, its schema version (``PRAGMA user_version``) and the migrations to it.

::

    events(key, body)          one row per listed event: its lifecycle state (key: EventId)
    removed_events(key, body)  one row per recently removed event: its last life, how and when it ended
    event_store(key, body)     one row ("store"): the document incarnation and the time of the last look
    approvals(key, body)       one row per approval ledger entry (key: EventId)
    action_runs(key, body)     one row per action run waiting, running or not yet reported
    open_spans(key, body)      one row per lifecycle span still open (key: EventId)
    spool(seq, uid, body)      the OTLP log records waiting for the collector, oldest first (their JSON);
                               inserted in the transaction that holds the rows saying they were emitted,
                               deleted when the collector took them

Each body is the JSON its component encodes; a row is written when it changed and deleted when its
component is done with it, never because a component is off in this run.

Versions: 1 is the database of this release's development (``meta`` and one ``sections`` row per component, its
``user_version`` 0); 2 is this one. ``migrate`` runs every step from what it finds to ``LATEST`` in one
transaction; a database of a newer release is refused (``TooNew``) before anything is written to it.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable

log = logging.getLogger("se_exporter.durable")
LATEST = 2
COMPONENT_TABLES = ("events", "removed_events", "event_store", "approvals", "action_runs", "open_spans")
TABLES = "".join(
    f"CREATE TABLE IF NOT EXISTS {table} (key TEXT PRIMARY KEY, body BLOB NOT NULL);\n" for table in COMPONENT_TABLES
) + ("CREATE TABLE IF NOT EXISTS spool (seq INTEGER PRIMARY KEY, uid TEXT NOT NULL UNIQUE, body BLOB NOT NULL);\n")
WAL_LIMIT_BYTES = 4 << 20
CACHE_KIB = 64  # sqlite's default is 2 MiB: the exporter's memory is bounded, its writes are few and small
BUSY_SECONDS = 5.0  # another process reading the file (an operator's sqlite3 shell) holds a write this long


class TooNew(Exception):
    """The database was written by a newer release (its schema version is above ``LATEST``)."""

    def __init__(self, found: int) -> None:
        super().__init__(f"schema version {found}, newer than {LATEST}, the newest this release knows")
        self.found = found


def version(connection: sqlite3.Connection) -> int:
    """The schema version of the database: ``user_version``, or 1 for this release's development (``sections``)."""
    found = int(connection.execute("PRAGMA user_version").fetchone()[0])
    if found == 0 and _has_table(connection, "sections"):
        return 1
    return found


def check(connection: sqlite3.Connection) -> None:
    """Raise ``TooNew`` for a database of a newer release (read only: nothing is written)."""
    if (found := version(connection)) > LATEST:
        raise TooNew(found)


def migrate(connection: sqlite3.Connection, convert_sections: Callable[[dict[str, bytes]], Rows]) -> None:
    """Bring the database to ``LATEST`` in one transaction (a new one is created at it); ``convert_sections``
    turns version 1's sections into rows (``durable/earlier_release.py``)."""
    found = version(connection)
    if found > LATEST:
        raise TooNew(found)
    if found == LATEST:
        return
    with connection:  # every step, or none
        connection.execute("BEGIN IMMEDIATE")
        if found == 1:
            rows = connection.execute("SELECT name, CAST(body AS BLOB) FROM sections")
            sections = {str(name): bytes(body) for name, body in rows}
            connection.execute("DROP TABLE sections")
            connection.execute("DROP TABLE IF EXISTS meta")
            connection.execute("DROP TABLE IF EXISTS finished")  # a record's state and its row commit together now
            _create(connection)
            put_rows(connection, convert_sections(sections))
            log.info(
                "state database migrated from schema version 1 to %d (%d section(s) as rows)", LATEST, len(sections)
            )
        else:
            _create(connection)
        connection.execute(f"PRAGMA user_version = {LATEST}")


Rows = dict[str, dict[str, bytes | None]]  # table -> key -> body (None: delete the row)


def put_rows(connection: sqlite3.Connection, rows: Rows) -> None:
    """Write (or delete, for None) each row; the caller holds the transaction."""
    for table, changes in rows.items():
        if table not in COMPONENT_TABLES:
            raise ValueError(f"no table {table!r}")
        upserts = [(key, body) for key, body in changes.items() if body is not None]
        deletes = [(key,) for key, body in changes.items() if body is None]
        if upserts:
            connection.executemany(f"INSERT OR REPLACE INTO {table} (key, body) VALUES (?, ?)", upserts)  # noqa: S608
        if deletes:
            connection.executemany(f"DELETE FROM {table} WHERE key = ?", deletes)  # noqa: S608


def configure(connection: sqlite3.Connection, max_bytes: int) -> None:
    """WAL, fsynced at every commit, bounded in bytes on disk and in memory."""
    connection.execute(f"PRAGMA busy_timeout = {int(BUSY_SECONDS * 1000)}")
    mode = connection.execute("PRAGMA journal_mode = WAL").fetchone()[0]
    if str(mode).lower() != "wal":  # a file system without shared memory for the WAL index: still durable
        log.info("state file: sqlite journal mode %s (WAL unavailable here)", mode)
    connection.execute("PRAGMA synchronous = FULL")
    connection.execute(f"PRAGMA journal_size_limit = {WAL_LIMIT_BYTES}")
    connection.execute(f"PRAGMA cache_size = -{CACHE_KIB}")
    page_size = int(connection.execute("PRAGMA page_size").fetchone()[0])
    connection.execute(f"PRAGMA max_page_count = {max(1, max_bytes // page_size)}")


def _create(connection: sqlite3.Connection) -> None:
    for statement in TABLES.strip().splitlines():
        connection.execute(statement)


def _has_table(connection: sqlite3.Connection, name: str) -> bool:
    found = connection.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)).fetchone()
    return found is not None
