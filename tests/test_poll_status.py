"""The poll loop's status as values: whether IMDS was never reached is a property, not a phrase to search
for in the readiness text (issue 57, point 3)."""

from __future__ import annotations

from types import MappingProxyType

import pytest

from se_exporter.poller.loop import POLL_ERROR_REASONS, UNREACHABLE, PollStatus

pytestmark = pytest.mark.pure


def status(last_success: float | None = None, **errors: int) -> PollStatus:
    counts = dict.fromkeys(POLL_ERROR_REASONS, 0) | errors
    return PollStatus(last_success=last_success, errors=MappingProxyType(counts))


@pytest.mark.parametrize(
    ("polled", "unreachable", "readiness"),
    [
        (status(), False, "Not ready: no successful IMDS poll yet"),
        (status(connection=3), True, f"Not ready: {UNREACHABLE}"),
        (status(timeout=1), True, f"Not ready: {UNREACHABLE}"),
        (status(connection=2, http_5xx=1), False, "Not ready: no successful IMDS poll yet"),  # IMDS answered once
        (status(invalid_document=1, timeout=4), False, "Not ready: no successful IMDS poll yet"),
        (status(last_success=1.0, connection=9), False, True),  # reached before: a later outage is no hint
    ],
)
def test_unreachable_is_a_value_and_readiness_follows_it(
    polled: PollStatus, unreachable: bool, readiness: bool | str
) -> None:
    assert polled.unreachable is unreachable
    assert polled.readiness == readiness
