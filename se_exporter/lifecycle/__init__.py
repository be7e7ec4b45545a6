"""The event store: a pure state machine over IMDS documents (``events``), and the values it keeps and
returns, event states and transitions (``lifecycle``)."""

from se_exporter.lifecycle.machine import MAX_NOT_BEFORE_HISTORY, EventStore

__all__ = ["MAX_NOT_BEFORE_HISTORY", "EventStore"]
