"""Wait on a condition with a deadline, instead of sleeping and hoping."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(
    condition: Callable[[], T | None],
    timeout: float = 10.0,
    what: str = "condition",
    interval: float = 0.02,
    retry_on: tuple[type[Exception], ...] = (Exception,),
) -> T:
    """Return the first truthy value of ``condition()``; fail with ``what`` after ``timeout`` s.

    An exception of a ``retry_on`` type (e.g. a port not open yet) counts as "not yet" and is reported
    at the deadline; any other exception fails at once. ``retry_on=()`` lets every exception through.
    """
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while True:
        try:
            value = condition()
            if value:
                return value
        except retry_on as error:
            last_error = error
        if time.monotonic() > deadline:
            detail = f" (last error: {last_error!r})" if last_error else ""
            raise AssertionError(f"timed out after {timeout}s waiting for {what}{detail}")
        time.sleep(interval)
