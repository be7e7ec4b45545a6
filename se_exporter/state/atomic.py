"""Persistence of the exporter's state across restarts (``--state.file``).

The file is JSON with one section per component ("store", "approvals", …). It is written
atomically: a temporary file in the same directory, fsynced, then renamed over the old one,
so a crash leaves either the old or the new state, never a torn one. A corrupt or unreadable
file is logged and ignored: losing history is better than refusing to monitor.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

from se_exporter.imds.document import ScheduledEvent, is_int
from se_exporter.store import EventState, EventStore

FORMAT_VERSION = 1
log = logging.getLogger(__name__)


class StateFile:
    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> dict[str, Any]:
        """The saved sections, or {} when there is no usable file (logged, never raised)."""
        try:
            data = json.loads(self.path.read_bytes())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            log.warning("ignoring unreadable state file %s: %s", self.path, exc)
            return {}
        if not isinstance(data, dict) or data.get("version") != FORMAT_VERSION:
            log.warning("ignoring state file %s: not a version %d state file", self.path, FORMAT_VERSION)
            return {}
        sections = data.get("sections")
        return sections if isinstance(sections, dict) else {}

    def save(self, sections: dict[str, Any]) -> None:
        """Replace the file atomically; raises OSError (the caller logs it and keeps going)."""
        payload = json.dumps({"version": FORMAT_VERSION, "sections": sections}, separators=(",", ":")).encode()
        write_atomically(self.path, payload)


def write_atomically(path: Path, payload: bytes) -> None:
    """Temporary file in the same directory, fsynced, renamed over ``path``, the rename fsynced too."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as out:  # mkstemp creates it 0600: the state is nobody else's
            out.write(payload)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_directory(path.parent)


def _fsync_directory(directory: Path) -> None:
    try:  # makes the rename itself durable; not possible on every platform
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def encode_store(store: EventStore) -> dict[str, Any]:
    return {
        "incarnation": store.incarnation,
        "events": [_encode_state(state) for state in store.events.values()],
        "removed": store.removed,
    }


def decode_store(section: Any) -> EventStore:
    """Rebuild a store; a malformed section is logged and yields an empty store."""
    try:
        states = [_decode_state(raw) for raw in section["events"]]
        incarnation = section["incarnation"]
        if incarnation is not None and not isinstance(incarnation, int):
            raise TypeError("incarnation is not an integer")
        removed = {str(event_id): int(life) for event_id, life in section.get("removed", {}).items()}
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:  # Overflow: "life": 1e999
        log.warning("ignoring the event store in the state file: %s: %s", type(exc).__name__, exc)
        return EventStore()
    return EventStore({state.event.event_id: state for state in states}, incarnation, removed)


def _encode_state(state: EventState) -> dict[str, Any]:
    event = state.event
    return {
        "event": {
            "event_id": event.event_id,
            "event_type": event.event_type,
            "event_status": event.event_status,
            "resource_type": event.resource_type,
            "resources": list(event.resources),
            "not_before": event.not_before.isoformat() if event.not_before else None,
            "description": event.description,
            "event_source": event.event_source,
            "duration_seconds": event.duration_seconds,
        },
        "first_seen": state.first_seen,
        "first_seen_status": state.first_seen_status,
        "started_at": state.started_at,
        "not_before_history": [moment.isoformat() for moment in state.not_before_history],
        "life": state.life,
    }


_TEXT_FIELDS = ("event_id", "event_type", "event_status", "resource_type", "description", "event_source")


def _check_event_fields(fields: dict[str, Any]) -> None:
    """A damaged file can be valid JSON with the wrong types: refuse them here, not at the next scrape."""
    texts = [fields.get(key, "") for key in _TEXT_FIELDS] + list(fields.get("resources") or [])
    for text in texts:
        if not isinstance(text, str):
            raise TypeError(f"event field {text!r:.40} is not a string")
        text.encode("utf-8")  # UnicodeEncodeError (a ValueError) for a lone surrogate
    if not isinstance(fields.get("resources", []), list):
        raise TypeError("event resources is not a list")
    duration = fields.get("duration_seconds", -1)
    if not is_int(duration):
        raise TypeError(f"event duration_seconds {duration!r:.40} is not an integer")


def _decode_state(raw: dict[str, Any]) -> EventState:
    fields = dict(raw["event"])
    _check_event_fields(fields)
    fields["resources"] = tuple(fields["resources"])
    fields["not_before"] = _decode_time(fields["not_before"])
    started_at = raw["started_at"]
    return EventState(
        event=ScheduledEvent(**fields),
        first_seen=float(raw["first_seen"]),
        first_seen_status=str(raw["first_seen_status"]),
        started_at=None if started_at is None else float(started_at),
        not_before_history=tuple(datetime.fromisoformat(moment) for moment in raw["not_before_history"]),
        life=int(raw.get("life", 1)),
    )


def _decode_time(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)
