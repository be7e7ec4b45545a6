"""The suite's ``LD_PRELOAD`` shims, compiled with gcc from their C source in this folder: ``step_clock.c`` (the
wall clock moved by the seconds in ``STEP_CLOCK_FILE``) and ``slow_fsync.c`` (a disk whose fsync takes the
seconds in ``SLOW_FSYNC_FILE``)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.support.tools import require

HERE = Path(__file__).resolve().parent


def build_shim(name: str, folder: Path) -> Path:
    """``<name>.c`` of this folder compiled into ``folder/<name>.so``; returns the library."""
    library = folder / f"{name}.so"
    gcc = require("gcc")
    subprocess.run(
        [gcc, "-shared", "-fPIC", "-o", str(library), str(HERE / f"{name}.c"), "-ldl"], check=True, timeout=60
    )
    return library
