"""What releases before this one left, read once to import it; removed two releases after this one.

- 0.1's state file (JSON, below) and its log journal, imported into a new database (``durable/opening.py``
  calls ``import_state_file``; the spool replays the journal);
- the sections of this release's development database (schema version 1), turned into rows by ``convert_sections``
  (``durable/schema.py``'s migration), as 0.1's sections are;
- the name: examples before this release called the file ``state.json``. When ``--state.file`` names a file
  that does not exist (``state.db``) and ``state.json`` is beside it, that file, its side files and its
  journal take the new name first (``take_earlier_name``), so changing the name in a unit or a chart loses
  nothing.

The state file was JSON, ``{"version": 1, "sections": {<name>: <section>}}``, written atomically (a
temporary file beside it, renamed: one a crash left behind is removed, ``remove_leftovers``). The log
spool was a journal of JSON lines beside it (``<state file>.spool``)::

    {"add": {<record>}}        a record to send
    {"ack": ["<uid>", ...]}     accepted by the collector: never sent again
    {"drop": ["<uid>", ...]}    dropped (the spool's bound, or a record the collector never takes)
    {"seen": ["<uid>", ...]}    delivered or dropped uids still remembered for de-duplication

Both are read bounded: the state file up to the bound it is given, the journal a line at a time (a line
longer than ``MAX_LINE_BYTES``, nothing an earlier release wrote, is skipped), its torn last line (a crash
mid-write) ignored.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO, cast

import msgspec

from se_exporter.common.files import NotARegularFile, open_regular, read_bounded
from se_exporter.durable.lock import StateLock
from se_exporter.platform import current

FORMAT_VERSION = 1
MAX_LINE_BYTES = 8 << 20  # a record is bounded by the 4 MiB IMDS body it comes from
log = logging.getLogger("se_exporter.durable")


class _StateFile(msgspec.Struct):
    version: int
    sections: dict[str, msgspec.Raw] = {}


def is_json_state(head: bytes) -> bool:
    """Whether a file starting with ``head`` is an earlier release's state file (or was meant to be)."""
    return head.lstrip()[:1] == b"{"


def state_sections(path: Path, max_bytes: int) -> tuple[bytes, dict[str, bytes]]:
    """An earlier release's state file as read, and its sections, each still its raw JSON; raises
    ``OSError`` (``NotARegularFile`` when too large) or ``ValueError`` saying why it cannot be used."""
    raw = read_bounded(path, max_bytes)
    try:
        data = msgspec.json.decode(raw, type=_StateFile)
    except msgspec.MsgspecError as error:
        raise ValueError(str(error)) from None
    if data.version != FORMAT_VERSION:
        raise ValueError(f"not a version {FORMAT_VERSION} state file")
    return raw, {name: bytes(section) for name, section in data.sections.items()}


EARLIER_NAME = "state.json"
_SIDE_FILES = ("-wal", "-shm", "-journal", ".spool")  # sqlite's, then 0.1's journal


def take_earlier_name(path: Path) -> None:
    """``state.json`` beside ``path``, when ``path`` does not exist yet, renamed to ``path`` with its side
    files (those first: a crash between two renames leaves nothing behind that the next start misses), under
    the old name's lock (``LockHeld`` if an exporter still runs on it)."""
    earlier = path.with_name(EARLIER_NAME)
    if earlier == path or path.exists() or path.is_symlink() or not earlier.is_file():
        return
    lock = StateLock.acquire(earlier)
    try:
        for side in _SIDE_FILES:
            with contextlib.suppress(FileNotFoundError):
                os.replace(earlier.with_name(earlier.name + side), path.with_name(path.name + side))
        os.replace(earlier, path)
        current().sync_directory(path.parent)
    finally:
        lock.release()
    with contextlib.suppress(OSError):
        earlier.with_name(earlier.name + ".lock").unlink()
    log.info("state file %s: moved here from %s, the name of earlier releases' examples", path, earlier)


def journal_path(state_file: Path) -> Path:
    return state_file.with_name(state_file.name + ".spool")


def journal_entries(path: Path) -> Iterator[dict[str, Any]]:
    """The entries of an earlier release's log spool, oldest first; damaged lines are logged and skipped."""
    try:
        file = open_regular(path)
    except FileNotFoundError:
        return
    except NotARegularFile as error:
        log.warning("ignoring log spool %s: %s", path, error.strerror)
        return
    except OSError as error:
        log.warning("ignoring unreadable log spool %s: %s", path, error)
        return
    with file:
        number, pending_damage = 0, ""
        while line := file.readline(MAX_LINE_BYTES + 1):
            number += 1
            if pending_damage:  # only the last line may be torn; anything before it is damage
                log.warning("log spool %s: skipping damaged line %d: %s", path, number - 1, pending_damage)
                pending_damage = ""
            if len(line) > MAX_LINE_BYTES:
                pending_damage = "longer than any record"
                _skip_rest_of_line(file)
                continue
            try:
                entry = json.loads(line)
                if not isinstance(entry, dict):
                    raise TypeError("not an object")
            except (ValueError, TypeError) as error:
                pending_damage = str(error)
                continue
            yield entry


def import_journal(journal: Path, connection: sqlite3.Connection, capacity: int, max_bytes: int) -> None:
    """0.1's spool journal beside the state file: the records it still owed the collector inserted into the
    ``spool`` table (the newest within the bounds), in one transaction, and the journal kept as
    ``<journal>.imported``. Records acknowledged or dropped in the journal are not imported."""
    if not journal.exists() and not journal.is_symlink():
        return
    pending: dict[str, bytes] = {}
    size = dropped = 0
    for entry in journal_entries(journal):
        try:
            if "add" in entry:
                body = _json(entry["add"])
                uid = str(entry["add"]["uid"])
                if uid not in pending:
                    pending[uid] = body
                    size += len(body)
                while len(pending) > capacity or size > max_bytes:
                    size -= len(pending.pop(next(iter(pending))))
                    dropped += 1
                continue
            for uid in entry.get("ack") or entry.get("drop") or entry["seen"]:
                if (gone := pending.pop(str(uid), None)) is not None:
                    size -= len(gone)
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            log.warning("log spool %s: skipping a damaged entry: %r", journal, error)
    with connection:
        connection.executemany("INSERT OR IGNORE INTO spool (uid, body) VALUES (?, ?)", pending.items())
    with contextlib.suppress(OSError):
        os.replace(journal, journal.with_name(journal.name + ".imported"))
    log.info(
        "log spool: imported %d record(s) from an earlier release's journal %s%s",
        len(pending),
        journal,
        f" ({dropped} older ones over the spool's bounds dropped)" if dropped else "",
    )


def _skip_rest_of_line(file: BinaryIO) -> None:
    while (chunk := file.readline(1 << 20)) and not chunk.endswith(b"\n"):
        pass


def remove_leftovers(path: Path) -> int:
    """Remove the temporary files an earlier release's write of the state file at ``path`` left behind in a
    crash (only the owner of ``path`` may call it: it holds the state lock); returns how many were removed."""
    removed = 0
    with contextlib.suppress(OSError):
        for leftover in path.parent.iterdir():
            if leftover.name.startswith(f".{path.name}.") and leftover.name.endswith(".tmp"):
                with contextlib.suppress(OSError):
                    leftover.unlink()
                    removed += 1
    return removed


def convert_sections(sections: dict[str, bytes]) -> dict[str, dict[str, bytes | None]]:
    """The rows of each table (``durable/schema.py``) that an earlier release's sections hold; a section that
    cannot be read is logged and left out (its component starts without it, as it would have)."""
    return converted_sections(sections)[0]


def converted_sections(sections: dict[str, bytes]) -> tuple[dict[str, dict[str, bytes | None]], int]:
    """``convert_sections``, and how many sections could not be used."""
    rows: dict[str, dict[str, bytes | None]] = {}
    unusable = 0
    for name, body in sections.items():
        try:
            converted = {
                table: {str(key): _json(value) for key, value in table_rows.items()}
                for table, table_rows in _CONVERTERS[name](json.loads(body)).items()
            }
        except (KeyError, TypeError, ValueError, AttributeError, RecursionError) as error:
            log.error("state file: its %s section cannot be used (%r): starting without it", name, error)
            unusable += 1
            continue
        for table, table_rows in converted.items():
            rows.setdefault(table, {}).update(table_rows)
    return rows, unusable


def _store(section: dict[str, object]) -> dict[str, dict[str, object]]:
    last_look = section.get("last_look")
    events = cast("list[dict[str, dict[str, str]]]", section["events"])
    removed = cast("dict[str, int]", section.get("removed") or {})
    return {
        "events": {state["event"]["event_id"]: state for state in events},
        "removed_events": {
            key: {"life": life, "kind": "removed", "at": last_look or 0.0} for key, life in removed.items()
        },
        "event_store": {"store": {"incarnation": section["incarnation"], "last_look": last_look}},
    }


def _approvals(section: dict[str, object]) -> dict[str, dict[str, object]]:
    entries = cast("dict[str, dict[str, object]]", section["events"])
    return {"approvals": {key: {**entry, "policy": section["policy"]} for key, entry in entries.items()}}


def _actions(section: dict[str, object]) -> dict[str, dict[str, object]]:
    runs = cast("list[dict[str, object]]", section["runs"])
    return {"action_runs": {f"{index:06d}/{run['action']}": run for index, run in enumerate(runs)}}


def _lifecycle(section: dict[str, object]) -> dict[str, dict[str, object]]:
    return {"open_spans": dict(section)}


_CONVERTERS = {"store": _store, "approvals": _approvals, "actions": _actions, "lifecycle": _lifecycle}


def _json(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
