"""OTLP test receiver (HTTP and gRPC, logs and traces) and its pytest fixtures.

Import as ``from tests.otlp import OTLPHttpReceiver, ...``; the pytest fixtures live in
:mod:`tests.otlp.fixtures` (register them from ``tests/conftest.py``, see that module).
The package itself only uses relative imports.
"""

from .grpc_receiver import OTLPGrpcReceiver
from .http_receiver import OTLPHttpReceiver
from .receiver import Failure, OTLPReceiver
from .records import (
    AttrValue,
    ReceivedLog,
    ReceivedSpan,
    RequestRecord,
    SpanEvent,
    SpanLink,
    SpanStatus,
    any_value_to_python,
    attributes_to_dict,
)
from .store import ReceiverTimeout, TelemetryStore

__all__ = [
    "AttrValue",
    "Failure",
    "OTLPGrpcReceiver",
    "OTLPHttpReceiver",
    "OTLPReceiver",
    "ReceivedLog",
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
