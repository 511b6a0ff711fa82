"""The sidecar as agents meet it: a separate process, real gRPC over a socket, real Postgres."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import psycopg
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from agentsaga.client import AsyncSagaClient, SidecarLost, StepUnresolved, ToolOutcomeUnknown
from agentsaga.v1 import sidecar_pb2 as pb
from sagatest.ledger_tools import add_fault, calls, effects
from sagatest.sidecar_fixtures import SidecarProcess

TOOLS = "sagatest.ledger_tools"
Factory = Callable[..., SidecarProcess]


def log_rows(dsn: str) -> list[tuple[int, str, str]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            "SELECT step_idx, tool, status FROM saga_log ORDER BY step_idx").fetchall()


def run_count(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM saga_runs").fetchone()
    assert row is not None
    return int(row[0])


def test_reworded_retry_over_grpc_produces_one_effect(sidecar_factory: Factory,
                                                      ledger: str) -> None:
    client = sidecar_factory(ledger, TOOLS).client()
    client.begin_run("refund-1182")
    add_fault(ledger, "create_ticket", "unknown_after_commit")
    with pytest.raises(ToolOutcomeUnknown) as unknown:
        client.dispatch("refund-1182", "create_ticket",
                        {"summary": "Refund for order 1182", "order_id": "1182"})
    result = client.dispatch("refund-1182", "create_ticket",
                             {"summary": "Order #1182 refund", "order_id": "1182"})
    tickets = effects(ledger, "ticket")
    assert len(tickets) == 1
    assert tickets[0]["key"] == unknown.value.idempotency_key
    assert result["id"] == f"TICKET-{tickets[0]['id']}"
    assert log_rows(ledger) == [(0, "create_ticket", "CONFIRMED")]


def test_sidecar_killed_after_the_effect_reconciles_on_restart_without_calling_again(
        sidecar_factory: Factory, ledger: str) -> None:
    first = sidecar_factory(ledger, TOOLS)
    client = first.client()
    client.begin_run("evicted-run")
    add_fault(ledger, "charge_card", "kill_after_commit")
    with pytest.raises(SidecarLost, match="outcome unknown") as lost:
        client.dispatch("evicted-run", "charge_card", {"customer_id": "cus_1", "amount": 500})
    assert lost.value.__cause__.code() is grpc.StatusCode.UNAVAILABLE  # type: ignore[union-attr]
    assert first.kill() == -9
    assert log_rows(ledger) == [(0, "charge_card", "INTENDED")]  # the outcome was never written

    second = sidecar_factory(ledger, TOOLS).client()
    begun = second.begin_run("evicted-run")
    assert begun.adopted and begun.owner_epoch == 2
    result = second.dispatch("evicted-run", "charge_card", {"customer_id": "cus_1", "amount": 500})
    charges = effects(ledger, "charge")
    assert len(charges) == 1 and result["id"] == f"CHARGE-{charges[0]['id']}"
    assert [c["what"] for c in calls(ledger, "charge_card")] == ["call", "lookup"]
    assert log_rows(ledger) == [(0, "charge_card", "CONFIRMED")]


def test_other_tool_while_unknown_is_step_unresolved(sidecar_factory: Factory,
                                                     ledger: str) -> None:
    client = sidecar_factory(ledger, TOOLS).client()
    client.begin_run("r")
    add_fault(ledger, "create_ticket", "unknown_after_commit")
    with pytest.raises(ToolOutcomeUnknown):
        client.dispatch("r", "create_ticket", {"summary": "a", "order_id": "1"})
    with pytest.raises(StepUnresolved, match="create_ticket"):
        client.dispatch("r", "charge_card", {"customer_id": "c", "amount": 5})
    assert calls(ledger, "charge_card") == []


@pytest.mark.parametrize(
    ("run_id", "tool", "args_json", "code", "says"),
    [
        ("ok-run", "launch_rocket", "{}", grpc.StatusCode.NOT_FOUND, "launch_rocket"),
        ("ok-run", "create_ticket", "[1, 2]", grpc.StatusCode.INVALID_ARGUMENT, "JSON object"),
        ("ok-run", "create_ticket", "{summary: x}", grpc.StatusCode.INVALID_ARGUMENT,
         "not valid JSON"),
        ("ok-run", "create_ticket", '{"summary": "' + "x" * (1 << 20) + '"}',
         grpc.StatusCode.INVALID_ARGUMENT, "limit"),
        ("ok-run", "create_ticket", '{"summary": "a\\u0000b", "order_id": "1"}',
         grpc.StatusCode.INVALID_ARGUMENT, "NUL"),
        ("", "create_ticket", "{}", grpc.StatusCode.INVALID_ARGUMENT, "empty"),
        ("run'; DROP TABLE saga_log;--", "create_ticket", "{}",
         grpc.StatusCode.INVALID_ARGUMENT, "characters"),
        ("never-begun", "create_ticket", '{"summary": "a", "order_id": "1"}',
         grpc.StatusCode.FAILED_PRECONDITION, "BeginRun"),
    ],
)
def test_bad_requests_get_a_status_code_and_write_nothing(
        sidecar_factory: Factory, ledger: str, run_id: str, tool: str, args_json: str,
        code: grpc.StatusCode, says: str) -> None:
    client = sidecar_factory(ledger, TOOLS).client()
    client.begin_run("ok-run")
    with pytest.raises(grpc.RpcError) as error:
        client.stub.Dispatch(pb.DispatchRequest(run_id=run_id, tool=tool, args_json=args_json))
    assert error.value.code() is code
    assert says in (error.value.details() or "")
    assert log_rows(ledger) == [] and calls(ledger) == []
    assert run_count(ledger) == 1


def test_ended_run_is_failed_precondition(sidecar_factory: Factory, ledger: str) -> None:
    client = sidecar_factory(ledger, TOOLS).client()
    client.begin_run("done-run")
    assert client.end_run("done-run").state == "succeeded"
    with pytest.raises(grpc.RpcError) as error:
        client.dispatch("done-run", "create_ticket", {"summary": "a", "order_id": "1"})
    assert error.value.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert "ended" in (error.value.details() or "")
    assert log_rows(ledger) == []
    # EndRun sent again (its answer lost) answers as the first did; another ending is refused
    assert client.end_run("done-run").state == "succeeded"
    with pytest.raises(grpc.RpcError) as error:
        client.end_run("done-run", "Failed")
    assert error.value.code() is grpc.StatusCode.FAILED_PRECONDITION


def test_health_reflection_and_tool_listing(sidecar_factory: Factory, ledger: str) -> None:
    sidecar = sidecar_factory(ledger, TOOLS)
    channel = grpc.insecure_channel(sidecar.address)
    health = health_pb2_grpc.HealthStub(channel)
    status = health.Check(health_pb2.HealthCheckRequest(service="agentsaga.v1.Sidecar"))
    assert status.status == health_pb2.HealthCheckResponse.SERVING
    reflect = reflection_pb2_grpc.ServerReflectionStub(channel)
    replies = reflect.ServerReflectionInfo(iter([
        reflection_pb2.ServerReflectionRequest(list_services="")]))
    names = {s.name for reply in replies for s in reply.list_services_response.service}
    # made at this first call (`server.LazyReflection`), listing what enable_server_reflection did
    assert names == {"agentsaga.v1.Sidecar", "grpc.health.v1.Health",
                     "grpc.reflection.v1alpha.ServerReflection"}
    replies = reflect.ServerReflectionInfo(iter([  # and again, from the handler made once
        reflection_pb2.ServerReflectionRequest(file_containing_symbol="agentsaga.v1.Sidecar")]))
    assert [r.file_descriptor_response.file_descriptor_proto for r in replies][0]
    channel.close()
    tools = {t.name: t.tool_class for t in sidecar.client().list_tools()}
    assert tools["create_ticket"] == "compensatable" and tools["search_orders"] == "pure"


def test_unix_socket_and_async_client(sidecar_factory: Factory, ledger: str,
                                      tmp_path: Path) -> None:
    socket_path = tmp_path / "sidecar.sock"
    sidecar = sidecar_factory(ledger, TOOLS, listen=f"unix:{socket_path}")
    assert sidecar.address == f"unix:{socket_path}"

    import asyncio

    async def scenario() -> tuple[dict[str, object], str, bool]:
        async with AsyncSagaClient(sidecar.address) as client:
            await client.wait_ready(timeout=10)
            await client.begin_run("async-run")
            assert "create_ticket" in {t.name for t in await client.list_tools()}
            result: dict[str, object] = await client.dispatch(
                "async-run", "create_ticket", {"summary": "s", "order_id": "9"})
            await client.reach_pivot("async-run", [
                {"tool": "send_email", "args": {"to": "c@example.com", "body": "hi"}}])
            waiting = await client.await_decision("async-run", timeout=0.1)
            unwound = await client.unwind("async-run")
            return result, waiting.state, unwound.settled

    result, state, settled = asyncio.run(scenario())
    tickets = effects(ledger, "ticket")
    assert len(tickets) == 1 and result["order_id"] == "9"
    assert state == "AwaitingApproval" and settled and tickets[0]["closed"] is True


def test_non_loopback_listen_is_refused(sidecar_factory: Factory, ledger: str) -> None:
    with pytest.raises(RuntimeError, match="not a loopback address"):
        sidecar_factory(ledger, TOOLS, listen="0.0.0.0:0")


def test_unreachable_postgres_at_start_is_a_clear_error_without_the_password() -> None:
    import os
    import subprocess
    import sys

    from sagatest.sidecar_fixtures import ROOT

    result = subprocess.run(
        [sys.executable, "-m", "agentsaga.cli", "sidecar", "--tools", TOOLS, "--listen",
         "127.0.0.1:0", "--dsn", "postgresql://agent:s3cret-pw@127.0.0.1:1/saga"],
        capture_output=True, text=True, cwd=ROOT, timeout=60,
        env={**os.environ, "AGENTSAGA_DB_WAIT_S": "1"})
    assert result.returncode == 2
    assert "cannot reach the saga log's Postgres at 127.0.0.1:1/saga" in result.stderr
    assert "AGENTSAGA_DSN" in result.stderr and "Traceback" not in result.stderr
    assert "s3cret-pw" not in result.stdout + result.stderr


def test_malformed_dsn_is_named_without_its_secret() -> None:
    import os
    import subprocess
    import sys

    from sagatest.sidecar_fixtures import ROOT

    result = subprocess.run(
        [sys.executable, "-m", "agentsaga.cli", "log", "--run", "r"], capture_output=True,
        text=True, cwd=ROOT, timeout=60,
        env={**os.environ, "AGENTSAGA_DSN": "host=db password=hunter2 s3cretTail dbname=saga"})
    assert result.returncode == 2 and "DSN" in result.stderr and "malformed" in result.stderr
    assert "s3cretTail" not in result.stderr + result.stdout and "Traceback" not in result.stderr


def test_unwind_waits_for_the_call_in_flight_and_compensates_it(sidecar_factory: Factory,
                                                                ledger: str) -> None:
    """R7/R8: an Unwind RPC must not settle a call still on the wire as never executed. The
    real system holds the call until the sidecar said the unwind is waiting for it: the race
    is exercised on every run, not only when the unwind happens to come early."""
    import threading

    from sagatest.ledger_tools import release
    from sagatest.world_fixtures import poll_until

    sidecar = sidecar_factory(ledger, TOOLS)
    agent, operator = sidecar.client(), sidecar.client()
    agent.begin_run("slow-run")
    add_fault(ledger, "create_ticket", "held_commit")
    call = threading.Thread(target=agent.dispatch, args=(
        "slow-run", "create_ticket", {"summary": "a", "order_id": "1"}))
    call.start()
    poll_until(lambda: calls(ledger, "create_ticket"))  # the call is on the wire
    reports: list[Any] = []
    unwind = threading.Thread(target=lambda: reports.append(operator.unwind("slow-run")))
    unwind.start()
    sidecar.wait_for_output("unwind waits for the call in flight")
    assert effects(ledger, "ticket") == []  # the call has not committed yet
    release(ledger, "create_ticket")
    call.join(timeout=60)
    unwind.join(timeout=60)
    assert not call.is_alive() and not unwind.is_alive()
    [report] = reports
    assert report.settled
    [ticket] = effects(ledger, "ticket")
    assert ticket["closed"] is True  # compensated, not left open as "never executed"


def test_calls_held_by_a_slow_system_do_not_wait_for_a_hot_thread(sidecar_factory: Factory,
                                                                  ledger: str) -> None:
    """One thread takes RPCs while calls are quick (AGENTSAGA_HOT_WORKERS=1); three calls held
    by the real system run at once all the same, each on its own thread, and a health check
    still answers while they are held (AGENTSAGA_WORKERS=4)."""
    import threading

    from sagatest.ledger_tools import release
    from sagatest.world_fixtures import poll_until

    sidecar = sidecar_factory(ledger, TOOLS, env={"AGENTSAGA_WORKERS": "4",
                                                  "AGENTSAGA_HOT_WORKERS": "1"})
    agent = sidecar.client()
    runs = [f"held-{i}" for i in range(3)]
    for run in runs:
        agent.begin_run(run)
    add_fault(ledger, "create_ticket", "held_commit", times=3)
    held = [threading.Thread(target=agent.dispatch, args=(
        run, "create_ticket", {"summary": run, "order_id": "1"})) for run in runs]
    for call in held:
        call.start()
    poll_until(lambda: len(calls(ledger, "create_ticket")) == 3, timeout=30)  # all three held
    assert effects(ledger, "ticket") == []
    health = health_pb2_grpc.HealthStub(grpc.insecure_channel(sidecar.address))
    assert health.Check(health_pb2.HealthCheckRequest(service=""), timeout=30).status == \
        health_pb2.HealthCheckResponse.SERVING
    for _ in runs:
        release(ledger, "create_ticket")
    for call in held:
        call.join(timeout=60)
        assert not call.is_alive()
    assert sorted(t["body"]["summary"] for t in effects(ledger, "ticket")) == runs
    assert [status for _, _, status in log_rows(ledger)] == ["CONFIRMED"] * 3
