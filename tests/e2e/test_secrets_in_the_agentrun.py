"""Planted card numbers and secrets never reach the AgentRun, the saga log or a span, end to end:
a real sidecar dispatches tools and stages a pivot whose arguments hold every planted form, the
operator (as the chart's ServiceAccount) writes the AgentRun's status from the log, an approver
approves with kubectl, the commit step goes out. The tools receive the real values; the AgentRun
read back from the API (conditions, message, annotations: all of it), the Events, every saga log
table, the operator's own output and every span both processes export (OTLP, payloads on) hold
none of them. The staged plan's commit arguments are the one place shown whole (R10: the
approver reads the email as it will be sent): every card number in them masked, nothing else."""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import grpc
import pytest

from agentsaga import redact
from sagatest.ledger_tools import effects
from sagatest.operator_fixtures import Cluster
from sagatest.otlp_collector import Collector, otel_env
from sagatest.planted_secrets import (
    CARDS,
    SECRETS,
    every_row,
    leaks,
    plan_leaks,
    planted_text,
    span_text,
)

RUN = "planted-4242"
TO = "customer@example.com"


def test_planted_secrets_never_reach_the_agentrun_the_log_or_a_span(
        cluster: Cluster, collector: tuple[Collector, int]) -> None:
    received, port = collector
    operator = cluster.start_operator("--standalone", env={
        **otel_env(port), "OTEL_SERVICE_NAME": "agentsaga-operator"})
    pod = cluster.create_pod("agent-0", RUN)
    agent = cluster.start_sidecar(pod, env={
        **otel_env(port), "OTEL_SERVICE_NAME": "agentsaga-sidecar",
        "AGENTSAGA_TRACE_PAYLOADS": "true"}).client()
    body = planted_text()
    agent.begin_run(RUN, agent="refunder")
    agent.dispatch(RUN, "create_ticket", {"summary": body, "order_id": "1182"})
    agent.dispatch(RUN, "create_draft", {"body": body})
    # arguments the tool cannot take: the error quotes what came, cut to its first 57 characters,
    # here in the middle of a card number
    cut = "x" * 40 + " " + CARDS["together"]
    with pytest.raises(grpc.RpcError) as refused:
        agent.dispatch(RUN, "charge_card", {"customer_id": body, "amount": cut})
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "'amount' must be an integer" in refused.value.details()
    staged = agent.reach_pivot(RUN, [{"tool": "send_email", "args": {"to": TO, "body": body}}])
    waiting = cluster.wait_phase(RUN, "AwaitingApproval")
    assert waiting["status"]["pivot"]["planHash"] == staged.plan_hash
    # the plan is shown whole, card numbers masked: an approver sees what is approved
    # (each with a digest of the whole number, keyed with the run's secret key)
    assert "[card ****4242 #" in json.dumps(waiting["status"]["pivot"], ensure_ascii=False)
    shown_body = waiting["status"]["pivot"]["commit"][0]["args"]["body"]
    assert re.sub(r" #[0-9a-f]{8}\]", "]", shown_body) == redact.mask_cards(body)

    # the approver's reason quotes a card and a password too: the operator records it
    reason = f"plan reviewed, refund to {CARDS['dots']}, {SECRETS['password']}"
    approval = {"status": {"approval": {"planHash": staged.plan_hash, "decision": "Approved",
                                        "approver": "alice", "reason": reason}}}
    patched = cluster.approver_kubectl("patch", "agentrun", RUN, "--subresource=status",
                                       "--type=merge", "-p", json.dumps(approval))
    assert patched.returncode == 0, patched.stderr
    approved = cluster.wait_run(RUN, lambda o: "approval" not in o["status"] and (
        o["status"].get("pivot") or {}).get("state") == "Approved")
    assert leaks(json.dumps(_without_plan_arguments(approved), ensure_ascii=False)) == [], \
        "in the approved AgentRun"
    agent.dispatch(RUN, "send_email", {"to": TO, "body": body})
    agent.end_run(RUN)
    finished = cluster.wait_phase(RUN, "Succeeded")

    # the tools got the real values (ground truth in the ledger)
    assert [e["body"]["body"] for e in effects(cluster.dsn, "email")] == [body]
    assert [e["body"]["summary"] for e in effects(cluster.dsn, "ticket")] == [body]

    # the AgentRun as the API serves it, every field, and what kubectl prints of it
    shown = json.dumps(_without_plan_arguments(finished), ensure_ascii=False)
    assert "[card ****4242]" in shown and "[redacted]" in shown
    assert leaks(shown) == [], "in the AgentRun"
    plan = json.dumps(finished["status"]["pivot"]["commit"], ensure_ascii=False)
    assert plan_leaks(plan) == list(SECRETS)
    described = cluster.kube.kubectl("get", "agentrun", RUN, "-o", "yaml")
    assert described.returncode == 0, described.stderr
    plan_leaks(described.stdout)  # no card number in what kubectl prints
    events = json.dumps(cluster.kube.objects("v1", "events", "default"), ensure_ascii=False)
    assert leaks(events) == [], "in an Event"

    rows = every_row(cluster.dsn, plans=False)
    assert "[card ****4242]" in rows["public.saga_log"]
    for table, text in rows.items():
        assert leaks(text) == [], f"in table {table}"
    assert plan_leaks(every_row(cluster.dsn)["public.saga_runs"]) == list(SECRETS)

    spans = received.wait_for(lambda got: {  # up to the run's last span, EndRun's
        "execute_tool create_ticket", "execute_tool send_email",
        "/agentsaga.v1.Sidecar/EndRun"} <= {s.name for _, s in got}
        and "agentsaga-operator" in {service for service, _ in got})
    exported = "\n".join(span_text(span) for _, span in spans)
    assert "[card ****4242]" in exported  # the payloads were exported, masked
    assert leaks(exported) == [], "in an exported span"
    assert leaks(operator.output()) == [], "in the operator's output"


def _without_plan_arguments(agentrun: dict[str, Any]) -> dict[str, Any]:
    """The AgentRun but its staged plan's commit arguments (shown whole, `plan_leaks`)."""
    copied = copy.deepcopy(agentrun)
    for step in ((copied.get("status") or {}).get("pivot") or {}).get("commit") or []:
        step.pop("args", None)
    return copied
