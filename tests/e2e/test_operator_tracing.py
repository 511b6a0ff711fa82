"""The run's one trace reaches the operator: the sidecar stamps the AgentRun with the run's
traceparent, and the operator's orphan-detection and Job-start spans join that trace (exported
over real OTLP/gRPC from both processes to a collector stand-in)."""

from __future__ import annotations

from agentsaga import telemetry
from sagatest.operator_fixtures import Cluster
from sagatest.otlp_collector import Collector, otel_env

RUN = "traced-run"


def test_orphan_and_job_start_spans_join_the_runs_trace(
        cluster: Cluster, collector: tuple[Collector, int]) -> None:
    spans_seen, port = collector
    cluster.apply_agentrun(RUN, orphanGracePeriodSeconds=1)
    cluster.start_operator("--standalone", env={**otel_env(port),
                                                "OTEL_SERVICE_NAME": "agentsaga-operator"})
    pod = cluster.create_pod("agent-0", RUN)
    sidecar = cluster.start_sidecar(pod, env={**otel_env(port),
                                              "OTEL_SERVICE_NAME": "agentsaga-sidecar"})
    sidecar.client().begin_run(RUN, agent="refunder")
    annotated = cluster.wait_run(RUN, lambda o: telemetry.ANNOTATION in (
        o["metadata"].get("annotations") or {}))
    traceparent = annotated["metadata"]["annotations"][telemetry.ANNOTATION]
    trace_id = bytes.fromhex(traceparent.split("-")[1])

    cluster.kube.evict("default", "agent-0")
    cluster.wait_jobs(1)
    # two processes export: wait for the sidecar's span of the run's trace as well
    spans = spans_seen.wait_for(lambda seen: {"operator orphan", "operator start job unwind"}
                                <= {span.name for _, span in seen} and any(
                                    service == "agentsaga-sidecar" and span.trace_id == trace_id
                                    for service, span in seen))
    begin = [span for service, span in spans
             if service == "agentsaga-sidecar" and span.trace_id == trace_id]
    operator = {span.name: span for service, span in spans if service == "agentsaga-operator"}
    assert begin, "the sidecar exported no span of the run's trace"
    assert operator["operator orphan"].trace_id == trace_id
    assert operator["operator start job unwind"].trace_id == trace_id
