"""Run creation is bounded per namespace in Postgres (migration 020), whatever sidecar begins
the runs: two sidecars of one namespace share its runs per window and its open runs; the
refusal says which bound and when to retry, over gRPC (RESOURCE_EXHAUSTED with RetryInfo) and
MCP (a tool error with the same words); a tenant's credential cannot reset or raise its
bounds. MCP calls draw on the request budgets gRPC calls draw on. Real Postgres with the
roles the migrations make, real gRPC and MCP servers, the official MCP client."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

import grpc
import httpx2
import mcp_types as types
import psycopg
import pytest
from google.rpc import error_details_pb2, status_pb2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from agentsaga.errors import RunsBounded
from agentsaga.saga.registry import Compensation, Effect, Registry, ref
from agentsaga.service.saga_service import SagaService
from agentsaga.settings import Settings
from agentsaga.sidecar.grpc_adapter import RETRY_AFTER_KEY
from agentsaga.sidecar.mcp_endpoint.handlers import Endpoint
from agentsaga.sidecar.mcp_endpoint.serving import serve_mcp
from agentsaga.sidecar.server import SidecarServicer, serve
from agentsaga.store import SagaLog, roles
from agentsaga.store.connections import with_user
from agentsaga.v1 import sidecar_pb2 as pb
from agentsaga.v1 import sidecar_pb2_grpc as pb_grpc
from sagatest.mcp_fixtures import run

NS = "bounded-team"


def _registry() -> Registry:
    registry = Registry()

    def note(text: str, idempotency_key: str) -> Effect:
        return Effect(f"note-{idempotency_key[:6]}", {"text": text})

    def unnote(note: str, idempotency_key: str) -> Effect:
        return Effect(note, {"deleted": note})

    registry.register(note, cls="reversible", lookup=lambda key: None,
                      compensate=lambda args, key: Compensation("unnote", {"note": ref(key)}))
    registry.register(unnote, cls="irreversible", lookup=lambda key: None)
    return registry


@dataclass
class Sidecar:
    """One sidecar of namespace NS: the service, its gRPC and MCP front ends."""

    service: SagaService
    stub: pb_grpc.SidecarStub
    mcp_url: str


@pytest.fixture
def bounded(pg: str) -> str:
    """NS provisioned with small bounds: 4 runs per 60 s, 3 open at once."""
    with psycopg.connect(pg) as conn:
        roles.provision(conn, NS)
        roles.set_run_bounds(conn, NS, roles.RunBounds(runs_per_window=4, window_s=60,
                                                      open_runs=3))
    return with_user(pg, roles.namespace_role(NS, "sidecar"))


def _sidecar(stack: ExitStack, dsn: str, pod: str, **settings: Any) -> Sidecar:
    saga_log = stack.enter_context(SagaLog(dsn, min_size=1, max_size=4).open(migrate=False))
    service = SagaService(saga_log, _registry(), Settings(
        recheck_pause_s=0, pod_namespace=NS, pod_name=pod, pod_uid=f"uid-{pod}", **settings))
    serving = serve(SidecarServicer(service), "127.0.0.1:0", workers=4)
    stack.callback(serving.stop)
    mcp = serve_mcp(Endpoint(service).server(), "127.0.0.1:0")
    stack.callback(mcp.stop)
    channel = stack.enter_context(grpc.insecure_channel(serving.address))
    return Sidecar(service, pb_grpc.SidecarStub(channel), mcp.url)


@pytest.fixture
def two_sidecars(bounded: str) -> Iterator[tuple[Sidecar, Sidecar]]:
    with ExitStack() as stack:
        yield _sidecar(stack, bounded, "pod-1"), _sidecar(stack, bounded, "pod-2")


async def _mcp_calls(url: str, run_id: str,
                     calls: list[tuple[str, dict[str, Any]]]) -> list[types.CallToolResult]:
    http = httpx2.AsyncClient(headers={"Agentsaga-Run-Id": run_id})
    async with Client(streamable_http_client(url, http_client=http)) as client:
        return [await client.call_tool(tool, args) for tool, args in calls]


def _text(result: types.CallToolResult) -> str:
    return "".join(c.text for c in result.content if isinstance(c, types.TextContent))


def _runs(pg: str) -> list[str]:
    with psycopg.connect(pg) as conn:
        return [str(r[0]) for r in conn.execute(
            "SELECT run_id FROM saga_runs WHERE namespace = %s ORDER BY run_id", (NS,))]


def _begin(sidecar: Sidecar, run_id: str) -> None:
    sidecar.stub.BeginRun(pb.BeginRunRequest(run_id=run_id), timeout=30)


def _end(sidecar: Sidecar, run_id: str) -> None:
    sidecar.stub.EndRun(pb.EndRunRequest(run_id=run_id, outcome="Failed"), timeout=30)


def test_two_sidecars_of_a_namespace_share_its_runs_per_window(
        pg: str, two_sidecars: tuple[Sidecar, Sidecar]) -> None:
    one, two = two_sidecars
    for i in range(2):  # begun and ended at once: four runs over two sidecars
        for sidecar, name in ((one, f"a-{i}"), (two, f"b-{i}")):
            _begin(sidecar, name)
            _end(sidecar, name)
    with pytest.raises(grpc.RpcError) as refused:
        _begin(two, "b-2")
    error = refused.value
    assert error.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    details = error.details()
    assert f"namespace '{NS}' began 4 runs in the last 60 s, its limit" in details
    assert "retry after" in details and "nothing was written" in details
    trailing = dict(error.trailing_metadata())
    wait = float(trailing[RETRY_AFTER_KEY])
    assert 0 < wait <= 60
    status = status_pb2.Status.FromString(trailing["grpc-status-details-bin"])
    info = error_details_pb2.RetryInfo()
    assert status.details[0].Unpack(info)
    assert abs(info.retry_delay.ToMilliseconds() / 1000 - wait) < 0.01
    # over MCP, from the other sidecar: a tool error saying the same, with the wait in _meta
    (answer,) = run(_mcp_calls(one.mcp_url, "a-9", [("note", {"text": "hi"})]))
    assert answer.is_error and answer.meta is not None
    assert answer.meta["agentsaga.io/error"] == "resource_exhausted"
    assert 0 < answer.meta["agentsaga.io/retryAfterSeconds"] <= 60
    said = _text(answer)
    assert f"namespace '{NS}' began 4 runs in the last 60 s" in said and "retry after" in said
    assert _runs(pg) == [f"{NS}/a-0", f"{NS}/a-1", f"{NS}/b-0", f"{NS}/b-1"]


def test_a_namespace_holds_at_most_its_open_runs_over_all_its_sidecars(
        pg: str, two_sidecars: tuple[Sidecar, Sidecar]) -> None:
    one, two = two_sidecars
    _begin(one, "open-1")
    _begin(two, "open-2")
    _begin(one, "open-3")
    with pytest.raises(grpc.RpcError) as refused:
        _begin(two, "open-4")
    assert refused.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert f"namespace '{NS}' holds 3 open runs, its limit" in refused.value.details()
    assert "end a run, then retry after" in refused.value.details()
    # BeginRun again of a run the namespace holds (adopting it) begins nothing: not counted
    _begin(one, "open-3")
    _end(one, "open-3")
    _begin(two, "open-4")
    assert len(_runs(pg)) == 4


def test_the_store_refuses_with_the_seconds_to_wait(pg: str, bounded: str) -> None:
    with SagaLog(bounded, min_size=1, max_size=1).open(migrate=False) as log:
        for i in range(3):
            log.begin_run(f"{NS}/s-{i}", namespace=NS)
        with pytest.raises(RunsBounded) as refused:
            log.begin_run(f"{NS}/s-3", namespace=NS)
    assert refused.value.retry_after_s is not None and refused.value.retry_after_s > 0


TENANT_ATTACKS = {
    "raise its own bounds": "UPDATE run_bounds SET runs_per_window = 1000000",
    "delete its bounds (falling back to no row)": "DELETE FROM run_bounds",
    "add a row of bounds": f"INSERT INTO run_bounds VALUES ('{NS}x', 1000000, 1, 1000000)",
    "read the bounds": "SELECT * FROM run_bounds",
    "lock another namespace's counter": "SELECT * FROM run_bound_locks FOR UPDATE",
    "forget the runs it began": f"DELETE FROM saga_runs WHERE namespace = '{NS}'",
    "backdate the runs it began": "UPDATE saga_runs SET created_at = now() - interval '1 day'",
    "drop the trigger": "ALTER TABLE saga_runs DISABLE TRIGGER saga_runs_bounded",
    "call the trigger's function": "SELECT agentsaga_bound_run_creation()",
}


@pytest.mark.parametrize("attack", list(TENANT_ATTACKS))
@pytest.mark.parametrize("kind", ["sidecar", "job"])
def test_a_tenant_cannot_reset_or_raise_its_run_bounds(pg: str, bounded: str, kind: str,
                                                        attack: str) -> None:
    tenant = with_user(pg, roles.namespace_role(NS, kind))
    with SagaLog(bounded, min_size=1, max_size=1).open(migrate=False) as log:
        log.begin_run(f"{NS}/seen", namespace=NS)
    with psycopg.connect(pg) as conn:
        before = (roles.run_bounds(conn), conn.execute(
            "SELECT run_id, created_at FROM saga_runs ORDER BY 1").fetchall())
    with psycopg.connect(tenant, autocommit=True) as conn, pytest.raises(psycopg.Error) as err:
        conn.execute(TENANT_ATTACKS[attack])
    assert isinstance(err.value, (psycopg.errors.InsufficientPrivilege,
                                  psycopg.errors.ObjectNotInPrerequisiteState)), err.value
    with psycopg.connect(pg) as conn:
        after = (roles.run_bounds(conn), conn.execute(
            "SELECT run_id, created_at FROM saga_runs ORDER BY 1").fetchall())
    assert after == before


def test_a_tenant_cannot_backdate_a_run_from_a_transaction_held_open(
        pg: str, bounded: str) -> None:
    """now() is the transaction's start; the bound counts the clock's time of each insert, so
    a transaction held open cannot begin runs that fall out of the window at once."""
    with psycopg.connect(bounded) as conn:
        conn.execute("SELECT pg_sleep(0)")  # the transaction has begun: now() is fixed
        for i in range(3):
            conn.execute("INSERT INTO saga_runs (run_id, namespace) VALUES (%s, %s)",
                         (f"{NS}/held-{i}", NS))
        stamps = conn.execute("SELECT now() < min(created_at) FROM saga_runs").fetchone()
        assert stamps is not None and stamps[0] is True
        with pytest.raises(psycopg.Error) as refused:
            conn.execute("INSERT INTO saga_runs (run_id, namespace) VALUES (%s, %s)",
                         (f"{NS}/held-3", NS))
    assert refused.value.sqlstate == "AS429"


def test_migrate_sets_a_namespaces_run_bounds(pg: str) -> None:
    with SagaLog(pg, min_size=1, max_size=1).open(migrate=False) as log:
        log.migrate({"other-team": {}}, bounds=roles.RunBounds(runs_per_window=7, window_s=30,
                                                               open_runs=2))
    with psycopg.connect(pg) as conn:
        bounds = roles.run_bounds(conn)
    assert bounds["other-team"] == roles.RunBounds(7, 30, 2)
    assert bounds["*"] == roles.RunBounds()


@pytest.fixture
def request_budget(pg: str) -> Iterator[Sidecar]:
    """A sidecar whose runs may make 2 requests per second (AGENTSAGA_MAX_RPCS_PER_S), with
    the per-call limit off, and no clock moving: the budget refills never."""
    with ExitStack() as stack:
        saga_log = stack.enter_context(SagaLog(pg, min_size=1, max_size=4).open())
        service = SagaService(saga_log, _registry(), Settings(
            recheck_pause_s=0, max_rpcs_per_s=2, max_calls_per_s=0), clock=lambda: 0.0)
        serving = serve(SidecarServicer(service), "127.0.0.1:0", workers=4)
        stack.callback(serving.stop)
        mcp = serve_mcp(Endpoint(service).server(), "127.0.0.1:0")
        stack.callback(mcp.stop)
        channel = stack.enter_context(grpc.insecure_channel(serving.address))
        yield Sidecar(service, pb_grpc.SidecarStub(channel), mcp.url)


def test_mcp_tool_calls_draw_on_the_request_budget_of_grpc_calls(
        pg: str, request_budget: Sidecar) -> None:
    sidecar = request_budget
    first, second, third = run(_mcp_calls(sidecar.mcp_url, "budget-1", [
        ("note", {"text": "one"}), ("note", {"text": "two"}), ("note", {"text": "three"})]))
    assert not first.is_error and not second.is_error
    assert third.is_error and third.meta is not None
    assert third.meta["agentsaga.io/error"] == "resource_exhausted"
    assert "run 'budget-1' makes more than 2 requests per second (AGENTSAGA_MAX_RPCS_PER_S)" \
        in _text(third)
    # the same budget: a gRPC request for the run is refused too
    with pytest.raises(grpc.RpcError) as refused:
        sidecar.stub.GetRun(pb.GetRunRequest(run_id="budget-1"), timeout=30)
    assert refused.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    with psycopg.connect(pg) as conn:
        steps = conn.execute("SELECT args->>'text' FROM saga_log WHERE run_id = 'budget-1'"
                             " ORDER BY step_idx").fetchall()
    assert [s[0] for s in steps] == ["one", "two"]
