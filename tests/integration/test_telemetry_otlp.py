"""The wire path: a real sidecar process and a real `agentsaga reconcile` job export OTLP/gRPC
(configured only by OTEL_* variables) to a collector stand-in that implements the
`opentelemetry-proto` TraceService; the job's spans continue the run's trace."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as trace_pb
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc as trace_grpc
from opentelemetry.sdk.trace import TracerProvider

from agentsaga import telemetry
from agentsaga.client import SagaClient
from tests.ledger_tools import add_fault
from tests.sidecar_fixtures import ROOT, SidecarProcess

TOOLS = "tests.ledger_tools"


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
    trace_grpc.add_TraceServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield servicer, port
    server.stop(0).wait()


@pytest.fixture
def agent_tracing() -> Iterator[TracerProvider]:
    """The agent's own OpenTelemetry (here: an SDK provider that records nowhere)."""
    provider = TracerProvider()
    previous = telemetry.install(telemetry.Telemetry(provider))
    yield provider
    telemetry.install(previous)


def otel_env(port: int) -> dict[str, str]:
    return {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_METRICS_EXPORTER": "none",
            "OTEL_BSP_SCHEDULE_DELAY": "50"}


def test_sidecar_and_reconcile_job_export_one_trace_over_otlp_grpc(
        collector: tuple[Collector, int], ledger: str, agent_tracing: TracerProvider,
        sidecar_factory: Callable[..., SidecarProcess]) -> None:
    received, port = collector
    sidecar = sidecar_factory(ledger, TOOLS, env=otel_env(port))
    agent = SagaClient(sidecar.address, timeout=30, tracing=True)
    add_fault(ledger, "create_ticket", "unknown_after_commit")
    with agent_tracing.get_tracer("agent").start_as_current_span("agent run") as root:
        agent.begin_run("otlp-1")
        answer = agent.dispatch_raw("otlp-1", "create_ticket",
                                    {"summary": "Refund order 1182", "order_id": "1182"})
    agent.close()
    trace_id = root.get_span_context().trace_id.to_bytes(16, "big")
    assert answer.status == "UNKNOWN"

    spans = received.wait_for(lambda got: any(s.name == "execute_tool create_ticket"
                                              for _, s in got))
    sidecar_spans = [s for service, s in spans if service == "agentsaga-sidecar"]
    assert {s.trace_id for s in sidecar_spans} == {trace_id}
    names = {s.name for s in sidecar_spans}
    assert {"/agentsaga.v1.Sidecar/BeginRun", "/agentsaga.v1.Sidecar/Dispatch",
            "execute_tool create_ticket"} <= names
    [dispatch] = [s for s in sidecar_spans if s.name == "execute_tool create_ticket"]
    attributes = {a.key: a.value for a in dispatch.attributes}
    assert attributes["gen_ai.operation.name"].string_value == "execute_tool"
    assert attributes["agentsaga.outcome"].string_value == "UNKNOWN"

    job = subprocess.run(
        [sys.executable, "-m", "agentsaga.cli", "reconcile", "--run", "otlp-1", "--dsn", ledger,
         "--tools", TOOLS],
        env={**os.environ, **otel_env(port)}, cwd=ROOT, capture_output=True, text=True,
        timeout=60)
    assert job.returncode == 0, job.stdout + job.stderr
    spans = received.wait_for(lambda got: any(s.name == "agentsaga reconcile" for _, s in got))
    job_spans = [s for service, s in spans if service == "agentsaga-reconcile"]
    assert {s.trace_id for s in job_spans} == {trace_id}  # hours later, the same trace
    names = {s.name for s in job_spans}
    assert {"agentsaga reconcile", "reconcile", "reconcile lookup"} <= names
    [begin] = [s for s in sidecar_spans if s.name == "/agentsaga.v1.Sidecar/BeginRun"]
    [top] = [s for s in job_spans if s.name == "agentsaga reconcile"]
    assert top.parent_span_id == begin.span_id  # continued from the context stored at BeginRun
