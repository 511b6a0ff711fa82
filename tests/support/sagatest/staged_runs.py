"""A refund run staged at its pivot through a real sidecar in the operator's test cluster, and
its approval by `kubectl patch` as a person: what the kubectl tests of the operator share."""

from __future__ import annotations

import json

from sagatest.operator_fixtures import Cluster

RUN = "refund-3001"
EMAIL = {"to": "customer@example.com", "body": "Your refund is on its way."}


def approve(cluster: Cluster, plan_hash: str, decision: str = "Approved") -> None:
    body = {"status": {"approval": {"planHash": plan_hash, "decision": decision,
                                    "approver": "alice", "reason": "checked the plan"}}}
    patched = cluster.approver_kubectl("patch", "agentrun", RUN, "--subresource=status",
                                       "--type=merge", "-p", json.dumps(body))
    assert patched.returncode == 0, patched.stderr


def staged_run(cluster: Cluster) -> str:
    """A run that reached its pivot through a real sidecar; returns the staged plan hash."""
    cluster.apply_agentrun(RUN, orphanGracePeriodSeconds=30)
    cluster.start_operator("--standalone")
    agent = cluster.start_sidecar(cluster.create_pod("agent-0", RUN)).client()
    agent.begin_run(RUN, agent="refunder")
    agent.dispatch(RUN, "create_draft", {"body": "draft of the apology"})
    charge = agent.dispatch(RUN, "charge_card", {"customer_id": "cus_1", "amount": 500})
    staged = agent.reach_pivot(RUN, [
        {"tool": "capture_charge", "args": {"charge_ref": charge["id"]}},
        {"tool": "send_email", "args": EMAIL},
    ])
    waiting = cluster.wait_phase(RUN, "AwaitingApproval")
    assert waiting["status"]["pivot"]["planHash"] == staged.plan_hash
    assert [s["tool"] for s in waiting["status"]["pivot"]["commit"]] == [
        "capture_charge", "send_email"]
    return str(staged.plan_hash)
