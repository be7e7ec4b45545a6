"""Where the suite keeps what is slow to make (a base image, the Wine prefix, the Go toolchain, the
Collector): outside the checkout, so a fresh clone reuses what an earlier run on the machine made
(``SE_TEST_CACHE``, else the XDG cache folder). Each thing is named by what it is made from, so a change
makes a new one instead of reusing a stale one; ``cache_lock`` lets one test worker at a time make it."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path


def _cache_root() -> Path:
    if named := os.environ.get("SE_TEST_CACHE"):
        return Path(named)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "azure-scheduled-events-exporter-tests"


CACHE = _cache_root()


@contextlib.contextmanager
def cache_lock(name: str) -> Iterator[None]:
    """One test worker (of any run on the machine) at a time makes the cached thing ``name``."""
    import fcntl  # POSIX: the Windows suite under Wine imports this module but runs none of it

    CACHE.mkdir(parents=True, exist_ok=True)
    with (CACHE / f"{name}.lock").open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
