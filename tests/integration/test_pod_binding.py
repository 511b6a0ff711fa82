"""R12 on Kubernetes: a run is bound to the pod the downward API names, never to an identity sent
in BeginRun; another pod adopts it only once the operator released it (saw the pod go); a run
of one namespace is never reached from another: a run id is unique within its namespace (real
sidecar processes, gRPC, Postgres)."""

from __future__ import annotations

from collections.abc import Callable

import grpc
import psycopg
import pytest

from agentsaga.keys import step_key
from agentsaga.store import SagaLog, roles
from agentsaga.store.connections import with_user
from agentsaga.v1 import sidecar_pb2 as pb
from sagatest.ledger_tools import effects
from sagatest.sidecar_fixtures import SidecarProcess

TOOLS = "sagatest.ledger_tools"
Factory = Callable[..., SidecarProcess]


def pod(name: str, uid: str, namespace: str = "payments") -> dict[str, str]:
    return {"AGENTSAGA_POD_NAME": name, "AGENTSAGA_POD_UID": uid,
            "AGENTSAGA_POD_NAMESPACE": namespace}


def credential(dsn: str, namespace: str = "payments") -> str:
    """The DSN of the namespace's own sidecar credential (provisioned as `agentsaga migrate
    --namespace` does): Postgres lets it see its namespace's runs only."""
    with psycopg.connect(dsn) as conn:
        return with_user(dsn, roles.provision(conn, namespace)["sidecar"])


def binding(dsn: str, run_id: str) -> tuple[str, str, str, int]:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT owner, pod_uid, namespace, owner_epoch FROM saga_runs"
                           " WHERE run_id = %s", (run_id,)).fetchone()
    assert row is not None
    return str(row[0]), str(row[1]), str(row[2]), int(row[3])


def test_a_second_pod_cannot_adopt_a_run_bound_to_a_live_pod(sidecar_factory: Factory,
                                                             ledger: str) -> None:
    sidecar = credential(ledger)
    first = sidecar_factory(sidecar, TOOLS, env=pod("agent-a", "uid-a")).client()
    first.stub.BeginRun(pb.BeginRunRequest(run_id="bound", pod_name="forged",
                                           pod_uid="uid-forged", namespace="elsewhere"))
    # the request's identity is ignored: the downward API's is bound; the run is payments's
    assert binding(ledger, "payments/bound") == ("agent-a", "uid-a", "payments", 1)

    second = sidecar_factory(sidecar, TOOLS, env=pod("agent-b", "uid-b")).client()
    for request in (pb.BeginRunRequest(run_id="bound"),
                    pb.BeginRunRequest(run_id="bound", pod_uid="uid-a", pod_name="agent-a")):
        with pytest.raises(grpc.RpcError) as refused:
            second.stub.BeginRun(request)
        assert refused.value.code() is grpc.StatusCode.PERMISSION_DENIED
        assert "alive as far as the operator knows" in (refused.value.details() or "")
    assert binding(ledger, "payments/bound") == ("agent-a", "uid-a", "payments", 1)  # kept
    first.dispatch("bound", "create_ticket", {"summary": "still mine", "order_id": "1"})
    first.reach_pivot("bound", [{"tool": "send_email",
                                 "args": {"to": "a@example.com", "body": "the plan"}}])
    # nor is the bound run's staged plan shown to the other pod
    with pytest.raises(grpc.RpcError) as hidden:
        second.stub.AwaitDecision(pb.AwaitDecisionRequest(run_id="bound", timeout_seconds=0.1))
    assert hidden.value.code() is grpc.StatusCode.PERMISSION_DENIED

    # the operator saw pod a go (evicted): now b adopts, and a is fenced (R12)
    with SagaLog(with_user(ledger, roles.OPERATOR), min_size=1, max_size=1).open(
            migrate=False) as operator:
        assert operator.release_pod("payments/bound", "uid-a")
    adopted = second.begin_run("bound")
    assert adopted.adopted
    assert binding(ledger, "payments/bound") == ("agent-b", "uid-b", "payments", 2)


def test_a_run_id_is_unique_within_its_namespace_only(sidecar_factory: Factory,
                                                      ledger: str) -> None:
    """Two namespaces run `refund-1`: two runs, two keys, two effects; neither sidecar reaches
    the other's run, by its bare id or by naming the other namespace."""
    payments = sidecar_factory(credential(ledger), TOOLS, env=pod("agent-p", "uid-p")).client()
    sandbox = sidecar_factory(credential(ledger, "sandbox"), TOOLS,
                              env=pod("agent-s", "uid-s", "sandbox")).client()
    for client, summary in ((payments, "a refund"), (sandbox, "a test")):
        began = client.begin_run("refund-1")
        assert not began.adopted and began.owner_epoch == 1
        client.dispatch("refund-1", "create_ticket", {"summary": summary, "order_id": "7"})
    assert binding(ledger, "payments/refund-1") == ("agent-p", "uid-p", "payments", 1)
    assert binding(ledger, "sandbox/refund-1") == ("agent-s", "uid-s", "sandbox", 1)
    tickets = effects(ledger, "ticket")
    assert [(t["key"], t["body"]["summary"]) for t in tickets] == [
        (step_key("payments/refund-1", 0, "create_ticket"), "a refund"),
        (step_key("sandbox/refund-1", 0, "create_ticket"), "a test")]

    # sandbox names payments's run outright: refused, and nothing changed
    stub, theirs = sandbox.stub, "payments/refund-1"
    calls: list[Callable[[], object]] = [
        lambda: stub.BeginRun(pb.BeginRunRequest(run_id=theirs)),
        lambda: stub.GetRun(pb.GetRunRequest(run_id=theirs)),
        lambda: stub.Unwind(pb.RunRequest(run_id=theirs))]
    for call in calls:
        with pytest.raises(grpc.RpcError) as other:
            call()
        assert other.value.code() is grpc.StatusCode.PERMISSION_DENIED
        assert "serves the runs of namespace 'sandbox' only" in (other.value.details() or "")
    assert binding(ledger, "payments/refund-1") == ("agent-p", "uid-p", "payments", 1)
    # its own run, qualified with its own namespace, is the same run as the bare id
    shown = sandbox.get_run("sandbox/refund-1")
    assert (shown.run_id, shown.owner_epoch, len(shown.steps)) == ("sandbox/refund-1", 1, 1)
    assert len(effects(ledger, "ticket")) == 2


def test_the_sidecar_role_cannot_release_a_pod_or_set_the_policy(ledger: str) -> None:
    with psycopg.connect(with_user(ledger, roles.SIDECAR)) as conn:
        for statement in ("UPDATE saga_runs SET released_pod = pod_uid",
                          "UPDATE saga_runs SET policy = '{}'"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(statement)
            conn.rollback()
