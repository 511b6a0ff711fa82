"""The wire path: a real sidecar process and a real `agentsaga reconcile` job export OTLP/gRPC
(configured only by OTEL_* variables) to a collector stand-in that implements the
`opentelemetry-proto` TraceService; the job's spans continue the run's trace."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator

import pytest
from opentelemetry.sdk.trace import TracerProvider

from agentsaga import telemetry
from agentsaga.client import SagaClient
from sagatest.ledger_tools import add_fault
from sagatest.otlp_collector import Collector, otel_env
from sagatest.sidecar_fixtures import ROOT, SidecarProcess

TOOLS = "sagatest.ledger_tools"


@pytest.fixture
def agent_tracing() -> Iterator[TracerProvider]:
    """The agent's own OpenTelemetry (here: an SDK provider that records nowhere)."""
    provider = TracerProvider()
    previous = telemetry.install(telemetry.Telemetry(provider))
    yield provider
    telemetry.install(previous)


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

    # the tool's span ends (and may be exported) before the Dispatch RPC's own span: wait for
    # every span asserted
    expected = {"/agentsaga.v1.Sidecar/BeginRun", "/agentsaga.v1.Sidecar/Dispatch",
                "execute_tool create_ticket"}
    spans = received.wait_for(lambda got: expected <= {s.name for service, s in got
                                                       if service == "agentsaga-sidecar"})
    sidecar_spans = [s for service, s in spans if service == "agentsaga-sidecar"]
    assert {s.trace_id for s in sidecar_spans} == {trace_id}
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
