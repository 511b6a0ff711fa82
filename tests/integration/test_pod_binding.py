"""R12 on Kubernetes: a run is bound to the pod the downward API names, never to an identity sent
in BeginRun; another pod adopts it only once the operator released it (saw the pod go); a run
of one namespace is never adopted from another (real sidecar processes, gRPC, Postgres)."""

from __future__ import annotations

from collections.abc import Callable

import grpc
import psycopg
import pytest

from agentsaga.store import SagaLog, roles
from agentsaga.store.connections import with_user
from agentsaga.v1 import sidecar_pb2 as pb
from sagatest.sidecar_fixtures import SidecarProcess

TOOLS = "sagatest.ledger_tools"
Factory = Callable[..., SidecarProcess]


def pod(name: str, uid: str, namespace: str = "payments") -> dict[str, str]:
    return {"AGENTSAGA_POD_NAME": name, "AGENTSAGA_POD_UID": uid,
            "AGENTSAGA_POD_NAMESPACE": namespace}


def binding(dsn: str, run_id: str) -> tuple[str, str, str, int]:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT owner, pod_uid, namespace, owner_epoch FROM saga_runs"
                           " WHERE run_id = %s", (run_id,)).fetchone()
    assert row is not None
    return str(row[0]), str(row[1]), str(row[2]), int(row[3])


def test_a_second_pod_cannot_adopt_a_run_bound_to_a_live_pod(sidecar_factory: Factory,
                                                             ledger: str) -> None:
    sidecar = with_user(ledger, roles.SIDECAR)
    first = sidecar_factory(sidecar, TOOLS, env=pod("agent-a", "uid-a")).client()
    first.stub.BeginRun(pb.BeginRunRequest(run_id="bound", pod_name="forged",
                                           pod_uid="uid-forged", namespace="elsewhere"))
    # the request's identity is ignored: the downward API's is bound
    assert binding(ledger, "bound") == ("agent-a", "uid-a", "payments", 1)

    second = sidecar_factory(sidecar, TOOLS, env=pod("agent-b", "uid-b")).client()
    for request in (pb.BeginRunRequest(run_id="bound"),
                    pb.BeginRunRequest(run_id="bound", pod_uid="uid-a", pod_name="agent-a")):
        with pytest.raises(grpc.RpcError) as refused:
            second.stub.BeginRun(request)
        assert refused.value.code() is grpc.StatusCode.PERMISSION_DENIED
        assert "alive as far as the operator knows" in (refused.value.details() or "")
    assert binding(ledger, "bound") == ("agent-a", "uid-a", "payments", 1)  # not fenced
    first.dispatch("bound", "create_ticket", {"summary": "still mine", "order_id": "1"})

    # the operator saw pod a go (evicted): now b adopts, and a is fenced (R12)
    with SagaLog(with_user(ledger, roles.OPERATOR), min_size=1, max_size=1).open(
            migrate=False) as operator:
        assert operator.release_pod("bound", "uid-a")
    adopted = second.begin_run("bound")
    assert adopted.adopted and binding(ledger, "bound") == ("agent-b", "uid-b", "payments", 2)

    sandbox = sidecar_factory(sidecar, TOOLS, env=pod("agent-c", "uid-c", "sandbox")).client()
    with SagaLog(with_user(ledger, roles.OPERATOR), min_size=1, max_size=1).open(
            migrate=False) as operator:
        operator.release_pod("bound", "uid-b")
    with pytest.raises(grpc.RpcError) as other:
        sandbox.stub.BeginRun(pb.BeginRunRequest(run_id="bound"))
    assert other.value.code() is grpc.StatusCode.PERMISSION_DENIED
    assert "another namespace" in (other.value.details() or "")


def test_the_sidecar_role_cannot_release_a_pod_or_set_the_policy(ledger: str) -> None:
    with psycopg.connect(with_user(ledger, roles.SIDECAR)) as conn:
        for statement in ("UPDATE saga_runs SET released_pod = pod_uid",
                          "UPDATE saga_runs SET policy = '{}'"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(statement)
            conn.rollback()
