"""Opening the state file at start-up (``open_database``): whatever is found there, the exporter comes up.

- Nothing: a new database.
- A database: opened and checked (``PRAGMA quick_check``). One that sqlite cannot read, or that fails the
  check, is moved aside as ``<state file>.discarded`` for a person to look at, and a new one begins.
- A database of an earlier schema version: migrated (``durable/schema.py``), in one transaction.
- A database of a newer release: refused (``schema.TooNew``), untouched: the caller stops with exit code 2.
- An earlier release's JSON state file (``durable/earlier_release.py``): its sections are imported as rows
  into a new database that takes its place, once (the temporary files that release left are removed then);
  the file itself is kept as ``<state file>.before-sqlite``. One that cannot be used (too large, not JSON,
  another version) is moved aside as ``<state file>.discarded``.
- Anything else (a FIFO, a device, a directory) is moved aside the same way.
- No file, but ``state.json`` beside it (earlier examples' name): that file takes the name first.

When the database cannot be made (a full disk, no inode left), the exporter monitors without state and
every write fails, counted: each tries to make it again, so once the disk has room the state is kept.

Every file that cannot be used is logged and counted (``persistence_errors_total{file="state"}``): losing
history is better than refusing to monitor.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import sqlite3
import tempfile
from dataclasses import dataclass
from pathlib import Path

from se_exporter.common.files import NotARegularFile, open_regular
from se_exporter.durable import schema
from se_exporter.durable.database import Database
from se_exporter.durable.earlier_release import (
    EARLIER_NAME,
    convert_sections,
    converted_sections,
    is_json_state,
    remove_leftovers,
    state_sections,
    take_earlier_name,
)
from se_exporter.durable.lock import LockHeld
from se_exporter.platform import PRIVATE_FILE_MODE, current

SQLITE_HEADER = b"SQLite format 3\x00"
SQLITE_TEMPORARY = ""  # sqlite's name for a private temporary database on disk
SIDE_FILES = ("-wal", "-shm", "-journal")  # what sqlite keeps beside a database
log = logging.getLogger("se_exporter.durable")


@dataclass(frozen=True, slots=True)
class OpenedDatabase:
    database: Database
    unusable: int  # files found that could not be used (0 or 1)
    # An earlier release's rows this run starts from when they could not be imported yet (a full disk);
    # None: the database's own.
    earlier_rows: schema.Rows | None = None


def open_memory_database() -> Database:
    """Without --state.file: a database for the log spool that nothing keeps. sqlite's private temporary
    database (its file deleted as it is made, in the temporary directory) holds no more than its page cache
    in memory; where no temporary directory can be written (a read-only container), ``:memory:``, which
    holds the whole table."""
    try:
        connection = _temporary(SQLITE_TEMPORARY)
    except sqlite3.Error as error:
        log.debug("no temporary directory for the log spool's database (%s): keeping it in memory", error)
        connection = _temporary(":memory:")
    return Database(connection, None)


def _temporary(name: str) -> sqlite3.Connection:
    connection = sqlite3.connect(name, check_same_thread=False, cached_statements=0)
    try:
        connection.execute(f"PRAGMA cache_size = -{schema.CACHE_KIB}")
        schema.migrate(connection, convert_sections)
        with connection:  # more than the page cache: sqlite makes its file now, or says it cannot
            connection.execute("CREATE TEMP TABLE probe (body BLOB)")
            connection.execute("INSERT INTO probe VALUES (zeroblob(?))", (4 * schema.CACHE_KIB << 10,))
            connection.execute("DROP TABLE probe")
    except BaseException:
        connection.close()
        raise
    return connection


def open_database(path: Path, max_bytes: int, earlier_max_bytes: int = 16 << 20) -> OpenedDatabase:
    """The database at ``path`` (at most ``max_bytes``), opened whatever was found there (see the module's
    docstring); an earlier release's state file is read up to ``earlier_max_bytes``."""
    try:
        take_earlier_name(path)
    except LockHeld:
        raise
    except OSError as error:  # it stays where it is, untouched
        log.error(
            "state file %s: cannot take over %s (%s): starting without it", path, path.with_name(EARLIER_NAME), error
        )
    try:
        head = _head(path)
    except NotARegularFile as error:  # opening it as a database could wait for ever (a FIFO)
        return _fresh(path, max_bytes, str(error.strerror))
    except OSError as error:
        return _fresh(path, max_bytes, f"cannot read it: {error.strerror or error}")
    if head and is_json_state(head):
        return _upgrade(path, max_bytes, earlier_max_bytes)
    if head and not head.startswith(SQLITE_HEADER):
        return _fresh(path, max_bytes, "neither a database nor a state file of an earlier release")
    return _existing(path, max_bytes, check=bool(head))


def _existing(path: Path, max_bytes: int, *, check: bool) -> OpenedDatabase:
    """A database (or nothing yet), checked when there was one."""
    try:
        return OpenedDatabase(Database(_connect(path, max_bytes, check=check), path), 0)
    except schema.TooNew:
        raise
    except (sqlite3.OperationalError, OSError) as error:  # it could not be made (a full disk): tried again
        return _unopened(path, max_bytes, f" cannot be opened ({error}): every write tries again", unusable=1)
    except sqlite3.DatabaseError as error:  # not a database, damaged
        return _fresh(path, max_bytes, f"sqlite: {error}")


def _begin(path: Path, max_bytes: int, *, unusable: int) -> OpenedDatabase:
    """A new (or just imported) database at ``path``; one that cannot be opened is tried again at each write."""
    try:
        return OpenedDatabase(Database(_connect(path, max_bytes, check=False), path), unusable)
    except (sqlite3.Error, OSError) as error:
        return _unopened(path, max_bytes, f" cannot be opened ({error}): every write tries again", unusable=unusable)


def _connect(path: Path, max_bytes: int, *, check: bool) -> sqlite3.Connection:
    _create_private(path)
    # No statement cache: a cached statement keeps its last bound values (a 3.5 MB record) until it runs again.
    connection = sqlite3.connect(path, check_same_thread=False, cached_statements=0)
    try:
        if check and (found := connection.execute("PRAGMA quick_check").fetchone()[0]) != "ok":
            raise sqlite3.DatabaseError(f"damaged: {found}")
        schema.check(connection)  # before anything is written: a newer release's file stays as it was
        schema.configure(connection, max_bytes)
        schema.migrate(connection, convert_sections)
    except BaseException:
        connection.close()
        raise
    return connection


def _unopened(path: Path, max_bytes: int, problem: str, *, unusable: int) -> OpenedDatabase:
    """No database for now (a full disk, no inode, a file that stays): said, and every write tries to open
    it again."""
    log.error("state file %s%s", path, problem)
    return OpenedDatabase(Database(None, path, reconnect=lambda: _connect(path, max_bytes, check=False)), unusable)


def _fresh(path: Path, max_bytes: int, problem: str) -> OpenedDatabase:
    """Move what cannot be used aside and begin a new database."""
    log.error("state file %s cannot be used (%s): starting without it%s", path, problem, _set_aside(path))
    return _begin(path, max_bytes, unusable=1)


def _upgrade(path: Path, max_bytes: int, earlier_max_bytes: int) -> OpenedDatabase:
    """An earlier release's state file: its sections in a new database that replaces it atomically (a crash
    before the rename leaves the JSON file, imported again at the next start)."""
    if removed := remove_leftovers(path):
        log.info("removed %d temporary file(s) a crash of an earlier release left next to %s", removed, path)
    try:
        original, sections = state_sections(path, earlier_max_bytes)
    except (OSError, ValueError) as error:
        problem = error.strerror if isinstance(error, NotARegularFile) else error
        return _fresh(path, max_bytes, str(problem))
    rows, unusable = converted_sections(sections)
    try:
        _replace_with_database(path, original, rows, len(sections))
    except (OSError, sqlite3.Error) as error:  # a full disk: the file stays; this run starts from its sections
        log.error(
            "state file %s: cannot import it into a database (%s): starting from it, and every write tries "
            "the import again",
            path,
            error,
        )

        def import_then_connect() -> sqlite3.Connection:
            _import_again(path, earlier_max_bytes)
            return _connect(path, max_bytes, check=False)

        return OpenedDatabase(Database(None, path, reconnect=import_then_connect), 1 + unusable, rows)
    return _begin(path, max_bytes, unusable=unusable)


def _import_again(path: Path, earlier_max_bytes: int) -> None:
    """At a write after an import that failed: the earlier file imported now (its sections are overwritten by
    the write that follows, with what this run made of them); raises ``OSError`` while the disk is full."""
    try:
        if not is_json_state(_head(path)):  # imported meanwhile, or gone: the database begins here
            return
        original, sections = state_sections(path, earlier_max_bytes)
    except ValueError as error:  # changed since the start into something else: not to be imported
        log.error("state file %s cannot be imported any more (%s)%s", path, error, _set_aside(path))
        return
    _replace_with_database(path, original, convert_sections(sections), len(sections))


def _replace_with_database(path: Path, original: bytes, rows: schema.Rows, sections: int) -> None:
    """The earlier file's rows in a new database that replaces it (the file kept as .before-sqlite)."""
    # For a person to look at: a crash before the rename below writes it again at the next start.
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_BINARY", 0)
    with os.fdopen(os.open(path.with_name(path.name + ".before-sqlite"), flags, PRIVATE_FILE_MODE), "wb") as kept:
        kept.write(original)
        kept.flush()
        os.fsync(kept.fileno())
    building = path.with_name(f".{path.name}.upgrade.tmp")
    for stale in (building, *(building.with_name(building.name + side) for side in SIDE_FILES)):
        stale.unlink(missing_ok=True)
    _create_private(building)
    connection = sqlite3.connect(building)
    try:
        schema.migrate(connection, convert_sections)
        with connection:
            schema.put_rows(connection, rows)
    finally:
        connection.close()
    os.replace(building, path)
    current().sync_directory(path.parent)
    log.info(
        "state file %s: imported the %d section(s) of an earlier release's state file into a database, as %d "
        "row(s) (the file is kept as %s.before-sqlite)",
        path,
        sections,
        sum(len(table) for table in rows.values()),
        path.name,
    )


def _create_private(path: Path) -> None:
    """An empty file (an empty database, to sqlite) only its owner reads, unless there is one: sqlite makes
    its WAL and shared-memory files with the database's mode."""
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), PRIVATE_FILE_MODE))


def check_writable(directory: Path) -> None:
    """Create ``directory`` if needed and prove a file can be written in it; ``OSError`` if not."""
    if directory.exists() and not directory.is_dir():  # mkdir would say "File exists"
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(directory))
    directory.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryFile(dir=directory):
        pass


def _head(path: Path) -> bytes:
    """The first bytes of the file (empty when there is none); ``NotARegularFile`` for a directory or FIFO."""
    try:
        file = open_regular(path)
    except FileNotFoundError:
        return b""
    with file:
        return file.read(len(SQLITE_HEADER))


def _set_aside(path: Path) -> str:
    """Keep what cannot be used for a person to look at (one copy: the last one)."""
    aside = path.with_name(path.name + ".discarded")
    try:
        os.replace(path, aside)
    except OSError as error:
        if error.errno == errno.ENOENT:
            return ""
        with contextlib.suppress(OSError):
            path.unlink()
        return ""
    for side in SIDE_FILES:  # a WAL belongs to the file it was written for
        with contextlib.suppress(OSError):
            path.with_name(path.name + side).unlink()
    return f"; kept as {aside}"
