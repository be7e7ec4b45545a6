"""Reading the state file at start-up: whatever is found, the exporter comes up.

The file is read only up to its bound (every component bounds what it saves, so a larger file is nothing
this version wrote) and decoded into its sections, each still raw (its component decodes it). What cannot
be used (too large, not JSON, another format version) is logged and set aside as ``<state file>.discarded``
for a person to look at; losing history is better than refusing to monitor.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import msgspec

from se_exporter.state.atomic import NotARegularFile, read_bounded

log = logging.getLogger("se_exporter.state.persistence")


class _StateFile(msgspec.Struct):
    version: int
    sections: dict[str, msgspec.Raw] = {}


def load_sections(path: Path, max_bytes: int, version: int) -> tuple[dict[str, msgspec.Raw], int]:
    """The file's sections, and how many unusable files were found (0 or 1: counted as persistence errors)."""
    try:
        raw = read_bounded(path, max_bytes)
        if raw is None or not raw.strip():
            return {}, 0
        data = msgspec.json.decode(raw, type=_StateFile)
    except NotARegularFile as exc:  # replaced by the first save (a directory makes every save fail)
        return _unusable(path, exc, "")
    except (OSError, msgspec.MsgspecError) as exc:
        return _unusable(path, exc, _set_aside(path))
    if data.version != version:
        return _unusable(path, f"not a version {version} state file", _set_aside(path))
    return data.sections, 0


def _unusable(path: Path, problem: object, kept: str) -> tuple[dict[str, msgspec.Raw], int]:
    log.error("state file %s cannot be used (%s): starting without it%s", path, problem, kept)
    return {}, 1


def _set_aside(path: Path) -> str:
    """Keep what cannot be used for a person to look at (one copy: the last one)."""
    aside = path.with_name(path.name + ".discarded")
    try:
        os.replace(path, aside)
    except OSError:
        return ""
    return f"; kept as {aside}"
