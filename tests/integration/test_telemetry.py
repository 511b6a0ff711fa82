"""One trace per run: agent -> sidecar (real gRPC) -> Stripe stand-in (real HTTP) -> reconcile ->
an unwind job that continues the run's trace from the saga log; asserted with in-memory
exporters, and a card number in the arguments never reaches a span."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode

from agentsaga import step_key, telemetry
from agentsaga.client import SagaClient
from agentsaga.connectors.tools import register_all
from agentsaga.saga.registry import Registry
from agentsaga.saga.resolution import unwind_run
from agentsaga.service.saga_service import SagaService
from agentsaga.settings import Settings
from agentsaga.sidecar.server import Serving, SidecarServicer, serve
from agentsaga.store import SagaLog
from agentsaga.v1 import sidecar_pb2 as pb
from agentsaga_lab.world import Fault, World
from sagatest.traced import Traced

RUN = "refund-1182"
CARD = "4242 4242 4242 4242"


@dataclass
class Stack:
    log: SagaLog
    registry: Registry
    serving: Serving
    client: SagaClient


@pytest.fixture
def stack(pg: str, world: World, traced: Traced) -> Iterator[Stack]:
    registry = register_all(Registry(), {"AGENTSAGA_STRIPE_API_BASE": world.url,
                                         "AGENTSAGA_STRIPE_API_KEY": "sk_test_world"})
    saga_log = SagaLog(pg, min_size=1, max_size=4, hooks=telemetry.TelemetryHooks()).open()
    service = SagaService(saga_log, registry, Settings(recheck_pause_s=0.01),
                          interceptors=[telemetry.TracingInterceptor()])
    serving = serve(SidecarServicer(service), "127.0.0.1:0", workers=4)
    client = SagaClient(serving.address, timeout=30, tracing=True)
    yield Stack(saga_log, registry, serving, client)
    client.close()
    serving.stop(0)
    saga_log.close()


def by_name(spans: list[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


def parent_of(span: ReadableSpan, spans: list[ReadableSpan]) -> ReadableSpan:
    assert span.parent is not None, f"{span.name} has no parent"
    [found] = [s for s in spans if s.context.span_id == span.parent.span_id]
    return found


def ancestors(span: ReadableSpan, spans: list[ReadableSpan]) -> list[str]:
    names = []
    while span.parent is not None:
        span = parent_of(span, spans)
        names.append(span.name)
    return names


def http_children(span: ReadableSpan, spans: list[ReadableSpan]) -> list[ReadableSpan]:
    return [s for s in spans if s.parent is not None and s.parent.span_id == span.context.span_id
            and "http.request.method" in (s.attributes or {})]


def metric_points(reader: InMemoryMetricReader) -> dict[str, list[Any]]:
    data = reader.get_metrics_data()
    assert data is not None
    return {m.name: list(m.data.data_points) for rm in data.resource_metrics
            for sm in rm.scope_metrics for m in sm.metrics}


def run_incident(stack: Stack, world: World, traced: Traced) -> tuple[int, str]:
    """The incident: the authorisation commits at Stripe but the answer is a 504 (UNKNOWN); the
    agent calls again with reworded arguments and the harness finds it by key; then the run is
    unwound by a job. Returns the agent's trace id and the PaymentIntent id."""
    world.faults.add(Fault("POST", "/v1/payment_intents", "commit_then_504", on_call=1))
    args = {"customer_id": "cus_1182", "amount": 4200, "order_id": "1182",
            "reason": f"refund for order 1182, customer read card {CARD} on the phone"}
    with traced.telemetry.tracer.start_as_current_span("agent refund-1182") as agent:
        stack.client.begin_run(RUN, agent="support-bot")
        first = stack.client.dispatch_raw(RUN, "charge_card", args)
        second = stack.client.dispatch_raw(RUN, "charge_card", {**args, "reason": "retry"})
    assert (first.outcome, second.outcome) == (pb.UNKNOWN, pb.CONFIRMED)
    report = unwind_run(stack.log, stack.registry, RUN, recheck_pause_s=0.01)
    assert report.settled
    return agent.get_span_context().trace_id, second.external_ref


def test_incident_run_is_one_span_tree_from_agent_to_compensation(
        stack: Stack, world: World, traced: Traced, pg: str) -> None:
    trace_id, pi_id = run_incident(stack, world, traced)
    spans = list(traced.spans.get_finished_spans())
    assert {s.context.trace_id for s in spans} == {trace_id}  # one trace, the job included

    first, second = by_name(spans, "execute_tool charge_card")
    key = step_key(RUN, 0, "charge_card")
    assert ancestors(first, spans)[-1] == "agent refund-1182"
    assert "/agentsaga.v1.Sidecar/Dispatch" in ancestors(first, spans)  # the sidecar's span
    assert first.attributes is not None and second.attributes is not None
    assert {k: first.attributes[k] for k in (
        "gen_ai.operation.name", "gen_ai.tool.name", "gen_ai.tool.call.id", "agentsaga.run_id",
        "agentsaga.tool.class", "agentsaga.step", "agentsaga.key", "agentsaga.outcome")} == {
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "charge_card",
        "gen_ai.tool.call.id": key, "agentsaga.run_id": RUN,
        "agentsaga.tool.class": "compensatable", "agentsaga.step": 0, "agentsaga.key": key,
        "agentsaga.outcome": "UNKNOWN"}
    assert first.status.status_code is StatusCode.ERROR
    [post] = http_children(first, spans)  # the real call, a child span
    assert post.attributes is not None
    assert post.attributes["http.request.method"] == "POST"
    assert str(post.attributes["url.full"]).endswith("/v1/payment_intents")
    assert post.attributes["http.response.status_code"] == 504

    assert second.attributes["agentsaga.outcome"] == "CONFIRMED"
    assert second.attributes["agentsaga.external_ref"] == pi_id
    [reconcile] = [s for s in spans if s.name == "reconcile charge_card"
                   and parent_of(s, spans) is second]
    assert reconcile.attributes is not None
    assert reconcile.attributes["agentsaga.reconcile.finding"] == "found"
    assert reconcile.attributes["agentsaga.reconcile.found"] == 1
    assert http_children(reconcile, spans), "the lookup by key went out under reconcile"
    assert not http_children(second, spans), "no second charge: found by key, not re-run"

    [job] = by_name(spans, "agentsaga unwind")
    with psycopg.connect(pg) as conn:
        [(stored,)] = conn.execute("SELECT trace_context FROM saga_runs WHERE run_id = %s",
                                   (RUN,)).fetchall()
    assert stored["traceparent"].split("-")[1] == f"{trace_id:032x}"
    assert job.parent is not None
    assert f"{job.parent.span_id:016x}" == stored["traceparent"].split("-")[2]
    assert parent_of(job, spans).name == "/agentsaga.v1.Sidecar/BeginRun"
    [compensate] = by_name(spans, "compensate charge_card")
    assert ancestors(compensate, spans)[0] == "agentsaga unwind"
    assert compensate.attributes is not None
    assert compensate.attributes["agentsaga.outcome"] == "COMPENSATED"
    assert compensate.attributes["agentsaga.compensation.state"] == "sent"
    calls = [str((c.attributes or {}).get("http.request.method")) + " "
             + str((c.attributes or {}).get("url.full")).split("/v1/", 1)[1]
             for c in http_children(compensate, spans)]
    assert calls == [f"GET payment_intents/{pi_id}", f"POST payment_intents/{pi_id}/cancel"]
    [intent] = world.truth()["payment_intents"]
    assert intent["status"] == "canceled"  # ground truth: the job really compensated
    assert telemetry.run_annotations(stored) == {
        "agentsaga.io/traceparent": stored["traceparent"]}


def test_a_card_number_in_the_arguments_never_reaches_a_span(
        stack: Stack, world: World, traced: Traced) -> None:
    run_incident(stack, world, traced)
    spans = traced.spans.get_finished_spans()
    exported = json.dumps([json.loads(s.to_json()) for s in spans])
    digits = CARD.replace(" ", "")
    assert CARD not in exported and digits not in exported
    assert "sk_test_world" not in exported
    [first, _] = by_name(list(spans), "execute_tool charge_card")
    assert first.attributes is not None
    recorded = json.loads(str(first.attributes["gen_ai.tool.call.arguments"]))
    assert recorded["reason"] == "refund for order 1182, customer read card [card ****4242] " \
                                 "on the phone"
    assert recorded["amount"] == 4200


def test_metrics_count_outcomes_reconcile_and_compensation(
        stack: Stack, world: World, traced: Traced) -> None:
    run_incident(stack, world, traced)
    points = metric_points(traced.metrics)
    outcomes = {p.attributes["agentsaga.status"]: p.value
                for p in points["agentsaga.step.outcomes"]}
    assert outcomes == {"UNKNOWN": 1, "CONFIRMED": 1, "COMPENSATED": 1}
    [found] = points["agentsaga.reconcile.results"]
    assert (found.attributes["agentsaga.reconcile.result"], found.value) == ("found", 1)
    durations = {p.attributes["agentsaga.outcome"]: p.count
                 for p in points["agentsaga.dispatch.duration"]}
    assert durations == {"UNKNOWN": 1, "CONFIRMED": 1}
    compensations = {p.attributes["agentsaga.compensation.state"]: p.value
                     for p in points["agentsaga.compensations"]}
    assert compensations == {"intended": 1, "sent": 1}
    jobs = {(p.attributes["agentsaga.job.kind"], p.attributes["agentsaga.job.outcome"]): p.value
            for p in points["agentsaga.jobs"]}
    assert jobs == {("unwind", "settled"): 1}
