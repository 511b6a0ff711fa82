"""Every RPC is bounded: AwaitDecision capped and over when its client goes, waits that
cannot starve health checks or ListTools, rate limits per run and in total, JSON depth and
lone surrogates refused as INVALID_ARGUMENT, and a database that refuses a write after the
call answered as an unknown outcome (real gRPC, a real sidecar process, real Postgres)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import grpc
import psycopg
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from agentsaga.client import ToolOutcomeUnknown
from agentsaga.v1 import sidecar_pb2 as pb
from agentsaga.v1 import sidecar_pb2_grpc as pb_grpc
from sagatest.ledger_tools import effects
from sagatest.sidecar_fixtures import SidecarProcess

TOOLS = "sagatest.ledger_tools"
Factory = Callable[..., SidecarProcess]
EMAIL = {"to": "customer@example.com", "body": "Your refund is on its way."}


def staged(sidecar: SidecarProcess, run_id: str) -> None:
    client = sidecar.client()
    client.begin_run(run_id)
    client.reach_pivot(run_id, [{"tool": "send_email", "args": EMAIL}])


def test_abandoned_waits_for_a_decision_starve_neither_health_nor_list_tools(
        sidecar_factory: Factory, ledger: str) -> None:
    sidecar = sidecar_factory(ledger, TOOLS, env={"AGENTSAGA_WORKERS": "2"})
    staged(sidecar, "waits")
    channel = grpc.insecure_channel(sidecar.address)
    stub = pb_grpc.SidecarStub(channel)
    health = health_pb2_grpc.HealthStub(channel)
    waits = [stub.AwaitDecision.future(pb.AwaitDecisionRequest(run_id="waits",
                                                               timeout_seconds=3600))
             for _ in range(2)]
    # one worker waits; the second wait is refused rather than take the last worker
    deadline = time.monotonic() + 30
    while not any(w.done() for w in waits):
        assert time.monotonic() < deadline, "neither wait was refused"
        time.sleep(0.05)
    refused = [w for w in waits if w.done()]
    assert len(refused) == 1
    check = health.Check(health_pb2.HealthCheckRequest(service=""), timeout=30)
    assert check.status == health_pb2.HealthCheckResponse.SERVING
    assert len(stub.ListTools(pb.ListToolsRequest(), timeout=30).tools) > 0
    for wait in waits:
        wait.cancel()  # the agent goes away
    assert all(w.code() is grpc.StatusCode.RESOURCE_EXHAUSTED for w in refused)
    # the waits end when their clients left: a new wait is taken again (within a deadline)
    deadline = time.monotonic() + 30
    while True:
        try:
            answer = stub.AwaitDecision(pb.AwaitDecisionRequest(run_id="waits",
                                                                timeout_seconds=0.05), timeout=30)
            break
        except grpc.RpcError as exc:
            assert exc.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
            assert time.monotonic() < deadline, "an abandoned wait kept its worker"
            time.sleep(0.1)
    assert answer.state == "AwaitingApproval"
    for _ in range(4):
        assert health.Check(health_pb2.HealthCheckRequest(service=""), timeout=30).status == \
            health_pb2.HealthCheckResponse.SERVING
    channel.close()


def test_await_decision_is_capped_whatever_timeout_it_asks_for(
        sidecar_factory: Factory, ledger: str) -> None:
    sidecar = sidecar_factory(ledger, TOOLS, env={"AGENTSAGA_AWAIT_DECISION_MAX_S": "0.2"})
    staged(sidecar, "capped")
    stub = sidecar.client().stub
    answer = stub.AwaitDecision(pb.AwaitDecisionRequest(run_id="capped", timeout_seconds=86400),
                                timeout=60)
    assert answer.state == "AwaitingApproval"


def test_requests_are_rate_limited_per_run_and_in_total(sidecar_factory: Factory,
                                                        ledger: str) -> None:
    per_run = sidecar_factory(ledger, TOOLS, env={"AGENTSAGA_MAX_RPCS_PER_S": "0.001"})
    stub = per_run.client().stub
    stub.BeginRun(pb.BeginRunRequest(run_id="chatty"))
    with pytest.raises(grpc.RpcError) as limited:
        stub.GetRun(pb.GetRunRequest(run_id="chatty"))
    assert limited.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    stub.BeginRun(pb.BeginRunRequest(run_id="quiet"))  # another run has its own budget

    total = sidecar_factory(ledger, TOOLS, env={"AGENTSAGA_MAX_TOTAL_RPCS_PER_S": "0.001"})
    stub = total.client().stub
    stub.ListTools(pb.ListToolsRequest())
    with pytest.raises(grpc.RpcError) as limited:
        stub.ListTools(pb.ListToolsRequest())
    assert limited.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "AGENTSAGA_MAX_TOTAL_RPCS_PER_S" in (limited.value.details() or "")
    health = health_pb2_grpc.HealthStub(grpc.insecure_channel(total.address))
    assert health.Check(health_pb2.HealthCheckRequest(service="")).status == \
        health_pb2.HealthCheckResponse.SERVING


@pytest.mark.parametrize(("rpc", "says"), [
    ("dispatch-deep", "nested more than 64"),
    ("dispatch-surrogate", "lone UTF-16 surrogate"),
    ("pivot-deep", "nested more than"),
    ("pivot-surrogate", "lone UTF-16 surrogate"),
])
def test_data_errors_are_invalid_argument(sidecar_factory: Factory, ledger: str, rpc: str,
                                          says: str) -> None:
    stub = sidecar_factory(ledger, TOOLS).client().stub
    stub.BeginRun(pb.BeginRunRequest(run_id="data"))
    deep = '{"body":' + "[" * 985 + "]" * 985 + ', "to": "a@example.com"}'
    surrogate = '{"to": "a@example.com", "body": "\\ud800"}'
    args = deep if rpc.endswith("deep") else surrogate
    with pytest.raises(grpc.RpcError) as error:
        if rpc.startswith("dispatch"):
            stub.Dispatch(pb.DispatchRequest(run_id="data", tool="send_email", args_json=args))
        else:
            stub.ReachPivot(pb.ReachPivotRequest(
                run_id="data", commit_plan_json=f'[{{"tool": "send_email", "args": {args}}}]'))
    assert error.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert says in (error.value.details() or "")


def test_plans_are_bounded_in_all_and_in_each_step_before_anything_is_staged(
        sidecar_factory: Factory, ledger: str) -> None:
    """AGENTSAGA_MAX_PLAN_BYTES bounds the whole plan before it is parsed; each step's
    arguments are held to AGENTSAGA_MAX_ARGS_BYTES, as its dispatch would hold them."""
    sidecar = sidecar_factory(ledger, TOOLS, env={"AGENTSAGA_MAX_ARGS_BYTES": "1000",
                                                  "AGENTSAGA_MAX_PLAN_BYTES": "5000"})
    client = sidecar.client()
    client.begin_run("bounded")
    small = {"to": "customer@example.com", "body": "b" * 600}
    too_many = json.dumps([{"tool": "send_email", "args": small}] * 10)
    large = {**small, "body": "b" * 1500}
    one_too_large = json.dumps([{"tool": "send_email", "args": EMAIL},
                                {"tool": "send_email", "args": large}])
    # the size its dispatch would measure: the arguments as the client sends them
    for plan_json, says in ((too_many, f"the commit plan is {len(too_many)} bytes; the limit "
                                       "is 5000 (AGENTSAGA_MAX_PLAN_BYTES)"),
                            (one_too_large, f"commit step 1: arguments are "
                                            f"{len(json.dumps(large))} bytes; the limit is 1000 "
                                            "(AGENTSAGA_MAX_ARGS_BYTES)")):
        with pytest.raises(grpc.RpcError) as error:
            client.stub.ReachPivot(pb.ReachPivotRequest(run_id="bounded",
                                                        commit_plan_json=plan_json))
        assert error.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert says in (error.value.details() or ""), error.value.details()
    with psycopg.connect(ledger) as conn:
        row = conn.execute("SELECT pivot, state FROM saga_runs WHERE run_id = 'bounded'")
        assert row.fetchone() == (None, "running")  # nothing staged
    staged = client.reach_pivot("bounded", [{"tool": "send_email", "args": small}])
    assert staged.state == "AwaitingApproval"


READ_ONLY = """
CREATE FUNCTION read_only_outcomes() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.status <> 'INTENDED' THEN
    RAISE EXCEPTION 'cannot execute UPDATE in a read-only transaction' USING ERRCODE = '25006';
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER read_only_outcomes BEFORE UPDATE ON saga_log
  FOR EACH ROW EXECUTE FUNCTION read_only_outcomes();
"""


def test_a_database_that_refuses_the_outcome_after_the_call_answers_unknown(
        sidecar_factory: Factory, ledger: str) -> None:
    """Read-only after a failover, between the call and its outcome: the effect happened, the
    agent is told OUTCOME UNKNOWN (not INTERNAL), and the row stays INTENDED for R7."""
    client = sidecar_factory(ledger, TOOLS).client()
    client.begin_run("failover")
    with psycopg.connect(ledger, autocommit=True) as conn:
        conn.execute(READ_ONLY)
    try:
        with pytest.raises(ToolOutcomeUnknown, match="could not record its outcome"):
            client.dispatch("failover", "create_ticket", {"summary": "a", "order_id": "1"})
        assert len(effects(ledger, "ticket")) == 1
    finally:
        with psycopg.connect(ledger, autocommit=True) as conn:
            conn.execute("DROP TRIGGER read_only_outcomes ON saga_log")
    run = client.get_run("failover")
    assert [(s.tool, s.status) for s in run.steps] == [("create_ticket", "INTENDED")]
    assert json.loads(run.steps[0].args_json) == {"summary": "a", "order_id": "1"}
