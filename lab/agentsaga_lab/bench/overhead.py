"""Dispatch overhead: direct call vs the in-process dispatcher vs the gRPC
sidecar on the same Postgres, with the floors (one durable INSERT/COMMIT, one gRPC round trip)
measured in the same run."""

from __future__ import annotations

import itertools
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from agentsaga.client import SagaClient
from agentsaga.service.saga_service import SagaService
from agentsaga.settings import Settings
from agentsaga.store import SagaLog
from agentsaga.store.provisioning import floor_commits
from agentsaga_lab.bench.stats import Sample, time_calls
from agentsaga_lab.bench.tools import noop, pure_noop, registry

_runs = itertools.count()


def run_id(prefix: str) -> str:
    return f"{prefix}-{next(_runs)}"


def direct(calls: int) -> Sample:
    """The tool called with no harness at all."""
    return time_calls(lambda i: noop(idempotency_key="k", n=i), calls)


def floor_commit(dsn: str, calls: int) -> Sample:
    """One durable `INSERT ... COMMIT` round trip (synchronous_commit on)."""
    with floor_commits(dsn) as commit_one:
        return time_calls(lambda i: commit_one(), calls)


def floor_grpc(address: str, calls: int) -> Sample:
    """One gRPC round trip to the sidecar's process that touches no database (health Check)."""
    with grpc.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        request = health_pb2.HealthCheckRequest(service="")
        return time_calls(lambda i: stub.Check(request, timeout=10), calls)


def in_process(dsn: str, calls: int, *, async_outcomes: bool = True,
               namespace: str = "") -> Sample:
    """The saga service in this process: a side-effecting no-op per call, one run; `namespace`:
    the agent namespace `dsn`'s credential belongs to (its runs are that namespace's)."""
    saga_log = SagaLog(dsn, async_outcomes=async_outcomes).open(migrate=False)
    try:
        dispatcher = SagaService(saga_log, registry,
                                 Settings(recheck_pause_s=0, pod_namespace=namespace))
        rid = run_id("inproc")
        dispatcher.begin_run(rid)

        def one(i: int) -> None:
            out = dispatcher.dispatch(rid, "noop", {"n": i})
            if out.outcome != "CONFIRMED":
                raise RuntimeError(f"dispatch: {out}")

        return time_calls(one, calls)
    finally:
        saga_log.close()


def through_sidecar(address: str, calls: int, tool: str = "noop") -> Sample:
    """The agent's view: SagaClient over gRPC to a separate sidecar process."""
    with SagaClient(address, timeout=30) as client:
        rid = run_id(f"sidecar-{tool}")
        client.begin_run(rid)
        args: dict[str, Any] = {"n": 0}
        return time_calls(lambda i: client.dispatch(rid, tool, args), calls)


def direct_pure(calls: int) -> Sample:
    return time_calls(lambda i: pure_noop(n=i), calls)
