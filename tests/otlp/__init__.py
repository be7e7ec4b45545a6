"""OTLP test receiver (HTTP and gRPC) and its pytest fixtures.

Import as ``from tests.otlp import OTLPHttpReceiver, ...``; the pytest fixtures live in
:mod:`tests.otlp.fixtures` (register them from ``tests/conftest.py``, see that module).
The package itself only uses relative imports.
"""

from .receiver import (
    AttrValue,
    Failure,
    MetricPoint,
    OTLPGrpcReceiver,
    OTLPHttpReceiver,
    OTLPReceiver,
    ReceivedLog,
    ReceivedMetric,
    ReceivedSpan,
    ReceiverTimeout,
    RequestRecord,
    SpanEvent,
    SpanLink,
    SpanStatus,
    TelemetryStore,
    any_value_to_python,
    attributes_to_dict,
)

__all__ = [
    "AttrValue",
    "Failure",
    "MetricPoint",
    "OTLPGrpcReceiver",
    "OTLPHttpReceiver",
    "OTLPReceiver",
    "ReceivedLog",
    "ReceivedMetric",
    "ReceivedSpan",
    "ReceiverTimeout",
    "RequestRecord",
    "SpanEvent",
    "SpanLink",
    "SpanStatus",
    "TelemetryStore",
    "any_value_to_python",
    "attributes_to_dict",
]
