"""The poll loop and what it hands on and needs (``loop``)."""

from se_exporter.poller.loop import (
    POLL_ERROR_REASONS,
    UNREACHABLE,
    Decider,
    Poller,
    PollResult,
    PollSink,
    PollStatus,
    Reactor,
)

__all__ = ["POLL_ERROR_REASONS", "UNREACHABLE", "Decider", "PollResult", "PollSink", "PollStatus", "Poller", "Reactor"]
