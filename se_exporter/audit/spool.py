"""A bounded, durable FIFO of audit records waiting for the OTLP collector.

The SDK's exporters give up after a short retry window; transitions and approvals must not. The
poll loop ``append``s records (before it saves the event store), the shipper ``peek``s the oldest,
exports them and ``ack``s them once the collector accepted them.

On disk (``<state.file>.spool``) the spool is a journal of JSON lines, each appended, flushed and
fsynced before the call returns::

    {"add": {<record>}}        a record to send
    {"ack": ["<uid>", ...]}     accepted by the collector: never sent again
    {"drop": ["<uid>", ...]}    dropped because the bound was hit (oldest first, counted)
    {"seen": ["<uid>", ...]}    delivered or dropped uids still remembered for de-duplication

Replaying it gives the pending records in order. A torn last line (crash mid-write) is ignored.
The journal is compacted (rewritten atomically) at start-up and when mostly garbage. ``uid``s of
pending and recently finished records are remembered, so a record appended twice (a transition
re-emitted after a crash between the append and the state save) is sent once.

A write that fails (a full disk) loses nothing: memory changes first, and the journal, which may now
end in a torn line, is not appended to again but rewritten whole, atomically, at the next write or at
``close`` (so records appended while the disk was full reach the file once space is back).
``write_errors`` counts the failures for ``persistence_errors_total{file="spool"}``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, BinaryIO

from se_exporter.audit.records import AuditRecord
from se_exporter.platform import PRIVATE_FILE_MODE
from se_exporter.state.atomic import write_atomically

log = logging.getLogger(__name__)
DEFAULT_CAPACITY = 10_000
COMPACT_AFTER_GARBAGE_LINES = 1024


class Spool:
    """Thread-safe; in memory only when ``path`` is None."""

    def __init__(self, path: Path | None, capacity: int = DEFAULT_CAPACITY) -> None:
        if capacity < 1:
            raise ValueError("spool capacity must be at least 1")
        self.path = path
        self.capacity = capacity
        self.dropped = 0  # since start-up (a Prometheus counter may reset with the process)
        self._pending: OrderedDict[str, AuditRecord] = OrderedDict()
        self._finished: OrderedDict[str, None] = OrderedDict()  # delivered/dropped uids, oldest first
        self._cond = threading.Condition()
        self._journal: BinaryIO | None = None
        self._garbage = 0  # journal lines that no longer describe a pending record
        self._closed = False
        self._woken = False
        self.write_errors = 0  # failed journal writes since start-up
        self._unsynced = False  # a write failed: the journal on disk is behind memory (or torn)
        if path is not None:
            self._load(path)
            if (excess := len(self._pending) - capacity) > 0:  # the bound may have been lowered since
                self._drop_oldest(excess)
            self._compact()

    @property
    def depth(self) -> int:
        with self._cond:
            return len(self._pending)

    @property
    def synced(self) -> bool:
        """False while a failed write left the journal behind what is in memory."""
        with self._cond:
            return not self._unsynced

    def append(self, records: Iterable[AuditRecord]) -> int:
        """Queue records not seen before; returns how many were new. Durable when it returns, unless the
        write failed (then at the next successful write or at ``close``)."""
        with self._cond:
            new = [r for r in records if r.uid not in self._pending and r.uid not in self._finished]
            if not new or self._closed:
                return 0
            for record in new:
                self._pending[record.uid] = record
            self._write([{"add": r.to_json()} for r in new])
            if (excess := len(self._pending) - self.capacity) > 0:
                self._drop_oldest(excess)
            self._maybe_compact()
            self._cond.notify_all()
            return len(new)

    def peek(self, limit: int) -> list[AuditRecord]:
        """The oldest pending records, still pending until acknowledged."""
        with self._cond:
            return [record for _, record in zip(range(limit), self._pending.values(), strict=False)]

    def ack(self, uids: Sequence[str]) -> None:
        """The collector accepted these: forget them for good (unknown uids are ignored)."""
        with self._cond:
            done = [uid for uid in uids if uid in self._pending]
            if not done or self._closed:
                return
            self._finish(done)
            self._write([{"ack": done}])
            self._maybe_compact()

    def set_aside(self, uid: str) -> None:
        """Give up on one record the collector will never take (counted as dropped)."""
        with self._cond:
            if uid not in self._pending or self._closed:
                return
            self._drop([uid])

    def wait(self, timeout: float | None = None) -> bool:
        """Block until something is pending (True), after ``wake`` or ``close``, or when ``timeout`` passes."""
        with self._cond:
            self._cond.wait_for(lambda: bool(self._pending) or self._closed or self._woken, timeout)
            return bool(self._pending) and not self._closed

    def wake(self) -> None:
        """Release ``wait``ers now and from now on (the shipper is stopping: it must not sleep again)."""
        with self._cond:
            self._woken = True
            self._cond.notify_all()

    def close(self) -> None:
        """Stop writing (later appends and acks are ignored); pending records stay on disk."""
        with self._cond:
            if self._unsynced:  # the last chance to get what the full disk refused into the file
                self._compact()
            self._closed = True
            if self._journal is not None:
                self._journal.close()
                self._journal = None
            self._cond.notify_all()

    def _drop_oldest(self, excess: int) -> None:
        self._drop([uid for _, uid in zip(range(excess), self._pending, strict=False)])
        log.warning("log spool full (%d records): dropped the %d oldest; is the OTLP collector reachable?",
                    self.capacity, excess)

    def _drop(self, uids: Sequence[str]) -> None:
        """Give up on these pending records: never sent, counted."""
        self._finish(uids)
        self._write([{"drop": list(uids)}])
        self.dropped += len(uids)

    def _finish(self, uids: Sequence[str]) -> None:
        for uid in uids:
            del self._pending[uid]
            self._finished[uid] = None
        while len(self._finished) > self.capacity:  # enough to catch any re-emission after a crash
            self._finished.popitem(last=False)
        self._garbage += 2 * len(uids)

    def _maybe_compact(self) -> None:
        if self._garbage > max(COMPACT_AFTER_GARBAGE_LINES, 2 * len(self._pending)):
            self._compact()

    def _write(self, entries: Sequence[dict[str, Any]]) -> None:
        """Persist ``entries``, which memory already reflects; after a failure, the whole state instead."""
        if self.path is None:
            return
        if self._unsynced:
            self._compact()
            return
        try:
            if self._journal is None:  # private like the state file: nobody else's business
                fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, PRIVATE_FILE_MODE)
                self._journal = os.fdopen(fd, "ab")
            self._journal.write(b"".join(_line(entry) for entry in entries))
            self._journal.flush()
            os.fsync(self._journal.fileno())
        except OSError as error:  # keep going in memory: losing durability beats losing monitoring
            self._failed("write", error)

    def _failed(self, what: str, error: OSError) -> None:
        self.write_errors += 1
        if not self._unsynced:  # one line per outage, not one per record
            log.error("cannot %s log spool %s: %s; records are kept in memory and written once it works again",
                      what, self.path, error)
        self._unsynced = True
        if self._journal is not None:  # it may end in a torn line: never append behind it
            with contextlib.suppress(OSError):
                self._journal.close()
            self._journal = None

    def _load(self, path: Path) -> None:
        try:
            lines = path.read_bytes().splitlines()
        except FileNotFoundError:
            return
        except OSError as error:
            log.warning("ignoring unreadable log spool %s: %s", path, error)
            return
        for number, line in enumerate(lines, 1):
            try:
                self._replay(json.loads(line))
            # OverflowError: a number out of range, such as "timestamp_ns": 1e999
            except (ValueError, KeyError, TypeError, AttributeError, OverflowError) as error:
                if number < len(lines):  # the last line may be torn by a crash; anything else is damage
                    log.warning("log spool %s: skipping damaged line %d: %s", path, number, error)
        if self._pending:
            log.info("log spool %s: %d record(s) still to send", path, len(self._pending))

    def _replay(self, entry: dict[str, Any]) -> None:
        if "add" in entry:
            record = AuditRecord.from_json(entry["add"])
            if record.uid not in self._finished:
                self._pending[record.uid] = record
            return
        uids = [str(uid) for uid in entry.get("ack") or entry.get("drop") or entry["seen"]]
        for uid in uids:
            self._pending.pop(uid, None)
            self._finished[uid] = None

    def _compact(self) -> None:
        """Rewrite the journal as just what is remembered, atomically (a crash keeps the old one)."""
        if self.path is None:
            return
        if self._journal is not None:
            with contextlib.suppress(OSError):
                self._journal.close()
            self._journal = None
        entries: list[dict[str, Any]] = [{"seen": list(self._finished)}] if self._finished else []
        entries += [{"add": record.to_json()} for record in self._pending.values()]
        try:
            write_atomically(self.path, b"".join(_line(entry) for entry in entries))
        except OSError as error:
            self._failed("rewrite", error)
            return
        if self._unsynced:
            log.info("log spool %s written again: %d record(s) pending", self.path, len(self._pending))
        self._unsynced = False
        self._garbage = 0


def _line(entry: dict[str, Any]) -> bytes:
    return json.dumps(entry, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"
