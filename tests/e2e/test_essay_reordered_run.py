"""The essay's reordered refund-and-reship run, end to end with the shipped connectors against
the world and the operator against a real API server: everything before the pivot is pure,
reversible or authorise-only; a human approves the staged plan with `kubectl patch`; then the
commit steps run, each through the log; nothing irreversible happened before the pivot."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentsaga.client import ApprovalRequired
from agentsaga_lab.demo.world import connector_env
from agentsaga_lab.world import World
from sagatest.operator_fixtures import Cluster

RUN = "refund-1182"
CUSTOMER = "dana@example.com"


def test_reordered_run_commits_after_one_kubectl_approval(cluster: Cluster, world: World) -> None:
    cluster.apply_agentrun(RUN, agent="support-agent", pivot={"required": True})
    cluster.start_operator("--standalone")
    pod = cluster.create_pod("support-agent-0", RUN)
    agent = cluster.start_sidecar(pod, env=connector_env(world.url),
                                  tools="agentsaga.connectors.tools").client()
    agent.begin_run(RUN, agent="support-agent")

    agent.dispatch(RUN, "search_orders", {"order_id": "1182"})  # pure
    email = {"to": CUSTOMER, "subject": "Your refund for order 1182",
             "body": "We are reshipping your order.", "correction_template": "correction"}
    draft = agent.dispatch(RUN, "create_email_draft", {k: email[k] for k in
                                                       ("to", "subject", "body")})
    ticket = agent.dispatch(RUN, "create_ticket_draft",
                            {"summary": "Refund for order 1182", "order_id": "1182"})
    charge = agent.dispatch(RUN, "charge_card", {"customer_id": "cus_1182", "amount": 1500,
                                                 "order_id": "1182"})
    with pytest.raises(ApprovalRequired):  # the model jumps ahead: nothing reaches the customer
        agent.dispatch(RUN, "send_email", email)
    assert world.truth()["emails"] == []

    commit: list[dict[str, Any]] = [
        {"tool": "capture_payment", "args": {"payment_intent": charge["id"]}},
        {"tool": "open_ticket", "args": {"ticket": ticket["id"]}},
        {"tool": "send_email", "args": email}]
    staged = agent.reach_pivot(RUN, commit)
    waiting = cluster.wait_phase(RUN, "AwaitingApproval")
    assert waiting["status"]["pivot"]["planHash"] == staged.plan_hash
    assert [s["tool"] for s in waiting["status"]["pivot"]["steps"]] == [
        "create_email_draft", "create_ticket_draft", "charge_card"]
    truth = world.truth()
    assert [t["state"] for t in truth["tickets"]] == ["draft"]
    assert [p["status"] for p in truth["payment_intents"]] == ["requires_capture"]
    assert [d["id"] for d in truth["drafts"]] == [draft["id"]]

    approval = {"status": {"approval": {"planHash": staged.plan_hash, "decision": "Approved",
                                        "approver": "alice", "reason": "refund policy ok"}}}
    patched = cluster.approver_kubectl("patch", "agentrun", RUN, "--subresource=status",
                                       "--type=merge", "-p", json.dumps(approval))
    assert patched.returncode == 0, patched.stderr
    waited = cluster.kube.kubectl("wait", f"agentrun/{RUN}", "--for=condition=PivotApproved",
                                  "--timeout=20s")
    assert waited.returncode == 0, waited.stderr
    assert agent.await_decision(RUN, timeout=10).state == "Approved"

    for step in commit:
        agent.dispatch(RUN, step["tool"], step["args"])
    agent.end_run(RUN)

    truth = world.truth()
    assert [t["state"] for t in truth["tickets"]] == ["open"]
    assert [(p["status"], p["amount_received"]) for p in truth["payment_intents"]] == [
        ("succeeded", 1500)]
    assert [e["to"] for e in truth["emails"]] in ([[CUSTOMER]], [CUSTOMER])
    run = agent.get_run(RUN)
    assert run.irreversible_before_pivot == 0
    assert [(s.tool, s.status) for s in run.steps] == [
        ("create_email_draft", "CONFIRMED"), ("create_ticket_draft", "CONFIRMED"),
        ("charge_card", "CONFIRMED"), ("capture_payment", "CONFIRMED"),
        ("open_ticket", "CONFIRMED"), ("send_email", "CONFIRMED")]
    done = cluster.wait_phase(RUN, "Succeeded")
    assert done["status"]["irreversibleBeforePivot"] == 0
