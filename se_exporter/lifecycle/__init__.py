"""The event store: a pure state machine over IMDS documents (``machine``), and the values it keeps and
returns, event states and transitions (``transitions``)."""

from se_exporter.lifecycle.machine import MAX_NOT_BEFORE_HISTORY, EventStore

__all__ = ["MAX_NOT_BEFORE_HISTORY", "EventStore"]
