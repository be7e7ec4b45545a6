"""The log spool's file (``<state.file>.spool``): a journal of JSON lines, appended and fsynced.

::

    {"add": {<record>}}        a record to send
    {"ack": ["<uid>", ...]}     accepted by the collector: never sent again
    {"drop": ["<uid>", ...]}    dropped (the spool's bound, or a record the collector never takes)
    {"seen": ["<uid>", ...]}    delivered or dropped uids still remembered for de-duplication

Replaying it gives the pending records in order. It is read a line at a time, never whole, and a
line longer than ``MAX_LINE_BYTES`` (nothing the spool writes) is skipped, so a journal of any size
replays within the spool's bounds. A torn last line (a crash mid-write) is ignored. ``compact``
rewrites it atomically as just what is remembered.

A write that fails (a full disk) leaves the file behind memory, perhaps ending in a torn line: it is
never appended to again but rewritten whole at the next write (``unsynced``); ``write_errors`` counts
the failures.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from se_exporter.platform import PRIVATE_FILE_MODE
from se_exporter.state.atomic import NotARegularFile, open_regular, remove_leftovers, write_atomically

log = logging.getLogger(__name__)
MAX_LINE_BYTES = 8 << 20  # a record is bounded by the 4 MiB IMDS body it comes from


class Journal:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.write_errors = 0
        self.unsynced = False  # a write failed: the file is behind memory (or torn)
        self._file: BinaryIO | None = None
        remove_leftovers(path)

    def replay(self) -> Iterator[dict[str, Any]]:
        """The entries on file, oldest first; damaged lines are logged and skipped."""
        try:
            file = open_regular(self.path)
        except NotARegularFile as error:
            log.warning("ignoring log spool %s: %s", self.path, error.strerror)
            return
        except OSError as error:
            log.warning("ignoring unreadable log spool %s: %s", self.path, error)
            return
        if file is None:
            return
        with file:
            number, pending_damage = 0, ""
            while line := file.readline(MAX_LINE_BYTES + 1):
                number += 1
                if pending_damage:  # only the last line may be torn; anything before it is damage
                    log.warning("log spool %s: skipping damaged line %d: %s", self.path, number - 1, pending_damage)
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

    def append(self, entries: Iterable[dict[str, Any]], everything: Callable[[], Iterable[dict[str, Any]]]) -> None:
        """Persist ``entries``, which memory already reflects; after a failure, ``everything()`` instead."""
        if self.unsynced:
            self.compact(everything())
            return
        try:
            if self._file is None:  # private like the state file: nobody else's business
                fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, PRIVATE_FILE_MODE)
                self._file = os.fdopen(fd, "ab")
            self._file.writelines(line(entry) for entry in entries)  # one at a time: never all of them at once
            self._file.flush()
            os.fsync(self._file.fileno())
        except OSError as error:  # keep going in memory: losing durability beats losing monitoring
            self._failed("write", error)

    def compact(self, entries: Iterable[dict[str, Any]]) -> bool:
        """Rewrite the file as ``entries``, atomically (a crash keeps the old one); False if that failed."""
        self.close()
        try:
            write_atomically(self.path, (line(entry) for entry in entries))
        except OSError as error:
            self._failed("rewrite", error)
            return False
        self.unsynced = False
        return True

    def close(self) -> None:
        if self._file is not None:
            with contextlib.suppress(OSError):
                self._file.close()
            self._file = None

    def _failed(self, what: str, error: OSError) -> None:
        self.write_errors += 1
        if not self.unsynced:  # one line per outage, not one per record
            log.error(
                "cannot %s log spool %s: %s; records are kept in memory and written once it works again",
                what,
                self.path,
                error,
            )
        self.unsynced = True
        self.close()  # it may end in a torn line: never append behind it


def line(entry: dict[str, Any]) -> bytes:
    return json.dumps(entry, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


def _skip_rest_of_line(file: BinaryIO) -> None:
    while (chunk := file.readline(1 << 20)) and not chunk.endswith(b"\n"):
        pass
