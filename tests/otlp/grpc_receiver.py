"""The OTLP/gRPC test receiver (insecure): the trace and logs services, one handler for both."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Final

import grpc
from google.protobuf.message import Message
from google.rpc import error_details_pb2

from .receiver import LOOPBACK, REQUEST_TYPES, OTLPReceiver
from .store import TelemetryStore

_SERVICES: Final = {
    "traces": "opentelemetry.proto.collector.trace.v1.TraceService",
    "logs": "opentelemetry.proto.collector.logs.v1.LogsService",
}
"""The services a collector offers for the signals the product sends (metrics: UNIMPLEMENTED)."""


class OTLPGrpcReceiver(OTLPReceiver):
    """OTLP/gRPC receiver (insecure) with the trace and logs services."""

    protocol = "grpc"

    def __init__(self, store: TelemetryStore | None = None, *, port: int = 0) -> None:
        super().__init__(store, port=port)
        self._server: grpc.Server | None = None
        self._executor: ThreadPoolExecutor | None = None

    def export(self, signal: str, request: Message, context: grpc.ServicerContext) -> Message:
        """One ``Export`` call: refused while a failure is set, else stored and answered."""
        headers = {key: value for key, value in context.invocation_metadata() if isinstance(value, str)}
        failure = self.take_failure()
        if failure is not None:
            self.store.record_rejected(
                signal, protocol="grpc", status=failure.grpc_code.name, headers=headers, message=request
            )
            if failure.retry_after is not None:
                delay = error_details_pb2.RetryInfo()
                delay.retry_delay.FromNanoseconds(int(failure.retry_after * 1e9))
                context.set_trailing_metadata((("google.rpc.retryinfo-bin", delay.SerializeToString()),))
            context.abort(failure.grpc_code, failure.message)
        self.store.ingest(signal, request, protocol="grpc", headers=headers)
        return self.response(request)

    def _service(self, signal: str) -> grpc.GenericRpcHandler:
        def export(request: Message, context: grpc.ServicerContext) -> Message:
            return self.export(signal, request, context)

        parse: Callable[[bytes], Message] = REQUEST_TYPES[signal].FromString
        method = grpc.unary_unary_rpc_method_handler(
            export, request_deserializer=parse, response_serializer=lambda response: response.SerializeToString()
        )
        return grpc.method_handlers_generic_handler(_SERVICES[signal], {"Export": method})

    def _bind_and_serve(self, port: int) -> int:
        deadline = time.monotonic() + 5.0
        while True:
            executor = ThreadPoolExecutor(max_workers=8, thread_name_prefix="otlp-grpc")
            # so_reuseport=0: nobody else can share the port, so stop() really makes it unreachable.
            server = grpc.server(executor, options=[("grpc.so_reuseport", 0)])
            server.add_generic_rpc_handlers(tuple(self._service(signal) for signal in _SERVICES))
            try:
                bound = server.add_insecure_port(f"{LOOPBACK}:{port}")
            except RuntimeError:
                bound = 0
            if bound:
                break
            executor.shutdown(wait=False)
            if not port or time.monotonic() > deadline:
                raise OSError(f"cannot bind OTLP/gRPC receiver to {LOOPBACK}:{port}")
            time.sleep(0.05)  # the old server's port is still being released: retry until the deadline
        server.start()
        self._server, self._executor = server, executor
        return int(bound)

    def _shutdown(self) -> None:
        server, executor = self._server, self._executor
        self._server = self._executor = None
        # The event is set once every listening socket is closed; a loaded machine (Wine) may take a while.
        if server is not None and not server.stop(grace=None).wait(timeout=60):
            raise RuntimeError("the gRPC receiver did not stop within 60 s")
        if executor is not None:
            executor.shutdown(wait=False)
