"""sqlite3 used plainly, for benchmarks/bench_writes.py: a table of N rows of about an event's size in a WAL
database fsynced at every commit (``synchronous=FULL``), one row updated per second, one commit each.

``python benchmarks/plain_sqlite.py PATH N`` prints ``writing`` once the table is filled, then writes until
killed.
"""

from __future__ import annotations

import sqlite3
import sys
import time

ROW = b'{"event": {"event_id": "%05d", "not_before": "%d"}, "description": "Host server maintenance"}' + b" " * 300


def main() -> None:
    path, count = sys.argv[1], int(sys.argv[2])
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = FULL")
    db.execute("CREATE TABLE IF NOT EXISTS events (key TEXT PRIMARY KEY, body BLOB NOT NULL)")
    with db:
        db.executemany(
            "INSERT OR REPLACE INTO events VALUES (?, ?)", ((f"{n:05d}", ROW % (n, 0)) for n in range(count))
        )
    print("writing", flush=True)
    second = 0
    while True:
        time.sleep(1.0)
        second += 1
        with db:
            db.execute(
                "UPDATE events SET body = ? WHERE key = ?", (ROW % (second % count, second), f"{second % count:05d}")
            )


if __name__ == "__main__":
    main()
