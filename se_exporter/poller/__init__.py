"""The poll loop (``loop``) and what it hands on and needs (``results``)."""

from se_exporter.poller.loop import Poller
from se_exporter.poller.results import (
    POLL_ERROR_REASONS,
    UNREACHABLE,
    Decider,
    PollResult,
    PollSink,
    PollStatus,
    Reactor,
)

__all__ = ["POLL_ERROR_REASONS", "UNREACHABLE", "Decider", "PollResult", "PollSink", "PollStatus", "Poller", "Reactor"]
