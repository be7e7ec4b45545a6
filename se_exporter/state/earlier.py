"""The files of releases before the database, read once to import them (``state/loading.py``).

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
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import msgspec

from se_exporter.common.files import NotARegularFile, open_regular, read_bounded

FORMAT_VERSION = 1
MAX_LINE_BYTES = 8 << 20  # a record is bounded by the 4 MiB IMDS body it comes from
log = logging.getLogger("se_exporter.state")


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
