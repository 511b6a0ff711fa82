"""A collector stand-in implementing the `opentelemetry-proto` TraceService over real gRPC."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as trace_pb
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc as trace_grpc


class Collector(trace_grpc.TraceServiceServicer):
    """Keeps every exported span as (service.name, span); `wait_for` blocks on a condition."""

    def __init__(self) -> None:
        self.spans: list[tuple[str, Any]] = []
        self.changed = threading.Condition()

    def Export(self, request: trace_pb.ExportTraceServiceRequest,
               context: grpc.ServicerContext) -> trace_pb.ExportTraceServiceResponse:
        with self.changed:
            for resource_spans in request.resource_spans:
                service = next((a.value.string_value for a in resource_spans.resource.attributes
                                if a.key == "service.name"), "")
                for scope_spans in resource_spans.scope_spans:
                    self.spans += [(service, span) for span in scope_spans.spans]
            self.changed.notify_all()
        return trace_pb.ExportTraceServiceResponse()

    def wait_for(self, found: Callable[[list[tuple[str, Any]]], bool],
                 timeout: float = 15.0) -> list[tuple[str, Any]]:
        with self.changed:
            if not self.changed.wait_for(lambda: found(self.spans), timeout=timeout):
                names = [(s, span.name) for s, span in self.spans]
                raise AssertionError(f"collector did not receive the spans; it has {names}")
            return list(self.spans)


@pytest.fixture
def collector() -> Iterator[tuple[Collector, int]]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    servicer = Collector()
    trace_grpc.add_TraceServiceServicer_to_server(servicer, server)  # type: ignore[no-untyped-call]
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield servicer, port
    server.stop(0).wait()


def otel_env(port: int) -> dict[str, str]:
    return {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_METRICS_EXPORTER": "none",
            "OTEL_BSP_SCHEDULE_DELAY": "50"}
