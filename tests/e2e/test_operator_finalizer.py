"""The finalizer: an AgentRun whose run has unsettled rows is not deleted until they are
settled, or until a human sets `agentsaga.io/force-delete: "true"`."""

from __future__ import annotations

import pytest

from agentsaga.client import SagaClient, ToolOutcomeUnknown
from sagatest.ledger_tools import add_fault
from sagatest.operator_fixtures import AR, Cluster, logged


def unknown_step(cluster: Cluster, agent: SagaClient, run: str) -> None:
    """A step whose outcome is unknown: the ticket exists, the 504 hid it (R5)."""
    agent.begin_run(run, agent="refunder")
    add_fault(cluster.dsn, "create_ticket", "unknown_after_commit")
    with pytest.raises(ToolOutcomeUnknown):
        agent.dispatch(run, "create_ticket", {"summary": "refund", "order_id": run})
    # the resync shows the step, the bind the pod: both before the deletion (whose condition
    # and message a late bind's own message would otherwise follow)
    cluster.wait_run(run, lambda o: ((o.get("status") or {}).get("steps") or {})
                     .get("unknown") == 1 and "pod" in (o.get("status") or {}))


def blocked(cluster: Cluster, run: str) -> dict[str, object]:
    deleted = cluster.kube.kubectl("delete", "agentrun", run, "--wait=false")
    assert deleted.returncode == 0, deleted.stderr
    return cluster.wait_run(run, lambda o: any(
        c["type"] == "Settled" and c["status"] == "False" and c["reason"] == "UnsettledSteps"
        for c in o["status"].get("conditions") or []))


def test_unsettled_run_survives_deletion_until_reconciled_or_forced(cluster: Cluster) -> None:
    cluster.start_operator("--standalone")
    agent = cluster.start_sidecar(cluster.create_pod("agent-0", "refund-4001")).client()
    unknown_step(cluster, agent, "refund-4001")
    unknown_step(cluster, agent, "refund-4002")

    held = blocked(cluster, "refund-4001")
    assert held["metadata"]["deletionTimestamp"]  # type: ignore[index]
    assert "agentsaga.io/finalizer" in held["metadata"]["finalizers"]  # type: ignore[index]
    [settled] = [c for c in held["status"]["conditions"]  # type: ignore[index]
                 if c["type"] == "Settled"]
    assert "step 0 create_ticket (UNKNOWN)" in settled["message"]

    # settled by reconcile (the ticket is found by key): the deletion completes
    job = cluster.create_job("reconcile-by-hand", "agentsaga", "reconcile", "--run",
                             logged("refund-4001"))
    settled = cluster.job_result(job)
    assert settled.returncode == 0 and settled.succeeded, settled.output
    cluster.kube.wait_for(AR, "agentruns", "default", "refund-4001", lambda o: o is None)

    # still unknown, but a human forces it
    blocked(cluster, "refund-4002")
    forced = cluster.kube.kubectl("annotate", "agentrun", "refund-4002",
                                  "agentsaga.io/force-delete=true")
    assert forced.returncode == 0, forced.stderr
    cluster.kube.wait_for(AR, "agentruns", "default", "refund-4002", lambda o: o is None)
