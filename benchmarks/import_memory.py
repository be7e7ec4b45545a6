"""Where memory goes at import: ``python -m benchmarks.import_memory [MODULE]``.

Run in a fresh interpreter: ``MODULE`` (``se_exporter.app``; ``benchmarks.reference_loop`` for the
reference loop's imports) is imported, with every import made by se_exporter's own code of a module
not yet loaded timed in resident memory (VmRSS before and after, inclusive of what it imports in turn).
Prints JSON: the RSS of the bare interpreter, after ``MODULE``, and each such import. Page-granular
and order-dependent (the first importer pays for what two share): a map, not a ledger.
"""

from __future__ import annotations

import builtins
import json
import re
import sys
from typing import Any


def _rss_kib() -> int:
    with open("/proc/self/status", encoding="utf-8") as status:
        match = re.search(r"VmRSS:\s+(\d+)", status.read())
    return int(match.group(1)) if match else 0


def measure(module: str) -> dict[str, Any]:
    bare = _rss_kib()
    original = builtins.__import__
    rows: list[tuple[int, str, str]] = []

    def timed(name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0) -> Any:
        caller = str((globals or {}).get("__name__") or "?")
        first = level == 0 and name not in sys.modules and not name.startswith("se_exporter")
        if not (first and caller.startswith("se_exporter")):
            return original(name, globals, locals, fromlist, level)
        before = _rss_kib()
        try:
            return original(name, globals, locals, fromlist, level)
        finally:
            rows.append((_rss_kib() - before, name, caller))

    builtins.__import__ = timed
    try:
        __import__(module)
    finally:
        builtins.__import__ = original
    return {
        "bare_rss_kib": bare,
        "rss_kib": _rss_kib(),
        "imports": [{"kib": kib, "module": name, "by": caller} for kib, name, caller in sorted(rows, reverse=True)],
    }


if __name__ == "__main__":
    print(json.dumps(measure(sys.argv[1] if len(sys.argv) > 1 else "se_exporter.app")))
