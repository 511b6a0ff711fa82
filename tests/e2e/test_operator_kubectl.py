"""What a human sees and does with kubectl: printer columns, the pivot approval by
`kubectl patch` (stale hashes refused, the decision recorded once), `kubectl wait` on the
operator's conditions, and a rejection that unwinds the run. The tests change nothing outside
`default` and share one cluster; those that change the admission policy or other namespaces are
in test_operator_kubectl_policy.py."""

from __future__ import annotations

import json

import grpc
import psycopg
import pytest

from agentsaga.operator.job_manifests import job_name
from agentsaga.saga.pivot import MAX_REVIEW_BYTES
from agentsaga.store import SagaLog
from sagatest.operator_fixtures import Cluster, logged
from sagatest.staged_runs import EMAIL, RUN, approve, staged_run

pytestmark = pytest.mark.one_cluster_per_module


def test_printer_columns_and_an_approval_by_kubectl_patch(cluster: Cluster) -> None:
    plan_hash = staged_run(cluster)

    table = cluster.kube.kubectl("get", "agentruns")
    assert table.returncode == 0, table.stderr
    header, row = table.stdout.splitlines()
    assert header.split() == ["NAME", "PHASE", "STEPS", "UNKNOWN", "PIVOT", "HUMAN", "AGE"]
    assert row.split()[:5] == [RUN, "AwaitingApproval", "2", "0", "AwaitingApproval"]

    # a stale plan hash: the admission policy refuses it; written straight to storage (as a
    # policy in Warn mode would let it through), the operator refuses it too
    stale_approval = {"planHash": "0" * 64, "decision": "Approved", "approver": "alice"}
    refused_patch = cluster.approver_kubectl(
        "patch", "agentrun", RUN, "--subresource=status", "--type=merge", "-p",
        json.dumps({"status": {"approval": stale_approval}}))
    assert refused_patch.returncode != 0
    assert "must equal status.pivot.planHash" in refused_patch.stderr
    cluster.write_status_as_operator(RUN, {"approval": stale_approval})
    stale = cluster.kube.kubectl("wait", f"agentrun/{RUN}", "--for=condition=PivotApproved=False",
                                 "--timeout=15s")
    assert stale.returncode == 0, stale.stderr
    refused = cluster.agentrun(RUN)
    assert refused is not None
    condition = next(c for c in refused["status"]["conditions"] if c["type"] == "PivotApproved")
    assert condition["reason"] == "StaleApproval" and plan_hash in condition["message"]
    assert "approval" not in refused["status"]  # consumed
    assert refused["status"]["pivot"]["state"] == "AwaitingApproval"

    approve(cluster, plan_hash)
    waited = cluster.kube.kubectl("wait", f"agentrun/{RUN}", "--for=condition=PivotApproved",
                                  "--timeout=15s")
    assert waited.returncode == 0, waited.stderr
    approved = cluster.wait_run(RUN, lambda o: "approval" not in o["status"])
    pivot = approved["status"]["pivot"]
    assert (pivot["state"], pivot["decision"], pivot["decidedBy"]) == (
        "Approved", "Approved", "alice")
    assert approved["status"]["phase"] == "Committing"
    with SagaLog(cluster.dsn, min_size=1, max_size=1).open(migrate=False) as saga_log:
        record = saga_log.require_run(logged(RUN)).pivot
    assert record is not None and (record.state, record.decided_by) == ("Approved", "alice")
    assert cluster.jobs() == []

    # the same approval sent again, then a late rejection: consumed, and the plan stays approved
    for decision in ("Approved", "Rejected"):
        approve(cluster, plan_hash, decision)
        after = cluster.wait_run(RUN, lambda o: "approval" not in o["status"]
                                 and "it stays Approved" in o["status"].get("message", ""))
        approved_now = next(c for c in after["status"]["conditions"]
                            if c["type"] == "PivotApproved")
        assert (approved_now["status"], approved_now["reason"]) == ("True", "Approved")
        assert after["status"]["pivot"]["state"] == "Approved"
    waited = cluster.kube.kubectl("wait", f"agentrun/{RUN}", "--for=condition=PivotApproved",
                                  "--timeout=15s")
    assert waited.returncode == 0, waited.stderr
    assert cluster.jobs() == []  # a late rejection unwinds nothing


def test_rejection_at_the_pivot_starts_the_unwind_job(cluster: Cluster) -> None:
    plan_hash = staged_run(cluster)
    approve(cluster, plan_hash, "Rejected")
    waited = cluster.kube.kubectl("wait", f"agentrun/{RUN}", "--for=condition=PivotRejected",
                                  "--timeout=15s")
    assert waited.returncode == 0, waited.stderr
    unwinding = cluster.wait_phase(RUN, "Unwinding")
    assert unwinding["status"]["pivot"]["decision"] == "Rejected"
    [job] = cluster.wait_jobs(1)
    assert job["metadata"]["name"] == job_name(RUN, "unwind", 1)
    assert job["spec"]["template"]["spec"]["containers"][0]["command"] == [
        "agentsaga", "unwind", "--run", logged(RUN)]


def test_a_plan_too_large_to_review_is_refused_and_a_large_one_is_shown_whole(
        cluster: Cluster) -> None:
    """A plan of five megabytes (each step within AGENTSAGA_MAX_ARGS_BYTES, the plan within
    AGENTSAGA_MAX_PLAN_BYTES) is more than a person reviews: refused at staging, saying what
    was too large and the limit, and nothing staged. A plan just under the limit is shown in
    status.pivot whole, every argument of every step, and approved by its planHash."""
    cluster.apply_agentrun(RUN, orphanGracePeriodSeconds=30)
    cluster.start_operator("--standalone")
    agent = cluster.start_sidecar(cluster.create_pod("agent-0", RUN)).client()
    agent.begin_run(RUN, agent="refunder")
    attachments = [{"to": "finance@example.com", "body": f"ledger {part} " + "x" * 1_000_000}
                   for part in range(5)]
    letter = {"to": "customer@example.com", "body": "Your refund is on its way."}
    with pytest.raises(grpc.RpcError) as refused:
        agent.reach_pivot(RUN, [*({"tool": "send_email", "args": a} for a in attachments),
                                {"tool": "send_email", "args": letter}])
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert f"the limit is {MAX_REVIEW_BYTES} bytes: too large to review" in (
        refused.value.details())
    with SagaLog(cluster.dsn, min_size=1, max_size=1).open(migrate=False) as saga_log:
        assert saga_log.require_run(logged(RUN)).pivot is None

    ledger = {"to": "finance@example.com", "body": "ledger " + "x" * (MAX_REVIEW_BYTES // 2)}
    staged = agent.reach_pivot(RUN, [{"tool": "send_email", "args": ledger},
                                     {"tool": "send_email", "args": letter}])
    waiting = cluster.wait_phase(RUN, "AwaitingApproval")
    assert [step["args"] for step in waiting["status"]["pivot"]["commit"]] == [ledger, letter]
    approve(cluster, staged.plan_hash)
    cluster.wait_run(RUN, lambda o: (o["status"].get("pivot") or {}).get("state") == "Approved")
    agent.dispatch(RUN, "send_email", letter)
    with SagaLog(cluster.dsn, min_size=1, max_size=1).open(migrate=False) as saga_log:
        steps = saga_log.steps(logged(RUN))
    assert [(s.tool, s.status) for s in steps] == [("send_email", "CONFIRMED")]


def test_an_approval_of_a_plan_staged_too_long_ago_is_refused_as_expired(
        cluster: Cluster) -> None:
    """The AgentRun gives its plans ten minutes (spec.pivot.approvalTtlSeconds); this one was
    staged an hour ago (the test moves stagedAt behind the saga log's trigger, as no tenant
    can). The approval is consumed, nothing is recorded, and the condition says why and what
    to do."""
    cluster.apply_agentrun(RUN, orphanGracePeriodSeconds=30, pivot={"approvalTtlSeconds": 600})
    cluster.start_operator("--standalone")
    agent = cluster.start_sidecar(cluster.create_pod("agent-0", RUN)).client()
    agent.begin_run(RUN, agent="refunder")
    staged = agent.reach_pivot(RUN, [{"tool": "send_email", "args": EMAIL}])
    cluster.wait_phase(RUN, "AwaitingApproval")
    with psycopg.connect(cluster.dsn) as conn:
        conn.execute("SET session_replication_role = replica")
        conn.execute("UPDATE saga_runs SET pivot = jsonb_set(pivot, '{stagedAt}', to_jsonb("
                     "to_char(now() - interval '1 hour', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')))"
                     " WHERE run_id = %s", (logged(RUN),))
    approve(cluster, staged.plan_hash)
    expired = cluster.kube.kubectl("wait", f"agentrun/{RUN}",
                                   "--for=condition=PivotApproved=False", "--timeout=15s")
    assert expired.returncode == 0, expired.stderr
    refused = cluster.wait_run(RUN, lambda o: "approval" not in o["status"])
    condition = next(c for c in refused["status"]["conditions"] if c["type"] == "PivotApproved")
    assert condition["reason"] == "ApprovalExpired", condition
    assert "approval time-to-live of 600s" in condition["message"]
    assert "Approve again once the agent has staged the plan again" in condition["message"]
    assert refused["status"]["pivot"]["state"] == "AwaitingApproval"
    with SagaLog(cluster.dsn, min_size=1, max_size=1).open(migrate=False) as saga_log:
        record = saga_log.require_run(logged(RUN)).pivot
    assert record is not None and record.state == "AwaitingApproval"
