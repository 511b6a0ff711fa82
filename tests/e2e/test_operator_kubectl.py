"""What a human sees and does with kubectl: printer columns, the pivot approval by
`kubectl patch` (stale hashes refused, the decision recorded once), `kubectl wait` on the
operator's conditions, and a rejection that unwinds the run."""

from __future__ import annotations

import json

import grpc
import psycopg
import pytest

from agentsaga.keys import log_run_id
from agentsaga.operator.job_manifests import job_name
from agentsaga.saga.pivot import MAX_REVIEW_BYTES
from agentsaga.store import SagaLog
from sagatest.cluster.chart import APPROVER_ROLE, bind_user, person_kubeconfig
from sagatest.operator_fixtures import Cluster, logged

RUN = "refund-3001"
ADMISSION = "admissionregistration.k8s.io/v1"
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


def test_no_approval_is_recorded_while_the_api_server_does_not_check_approvers(
        cluster: Cluster) -> None:
    plan_hash = staged_run(cluster)
    binding = "saga-agentsaga-approval"
    deny = cluster.kube.get(ADMISSION, "validatingadmissionpolicybindings", None, binding)
    assert deny is not None and deny["spec"]["validationActions"] == ["Deny"]

    # Warn only: the approver's name is refused by nothing, so the operator records nothing
    cluster.kube.patch(ADMISSION, "validatingadmissionpolicybindings", None, binding,
                       {"spec": {"validationActions": ["Warn", "Audit"]}})
    approve(cluster, plan_hash)
    untrusted = cluster.wait_run(RUN, lambda o: "approval" not in o["status"])
    condition = next(c for c in untrusted["status"]["conditions"] if c["type"] == "PivotApproved")
    assert (condition["status"], condition["reason"]) == ("False", "ApprovalUntrusted")
    assert "not bound with validationActions Deny" in condition["message"]
    assert untrusted["status"]["pivot"]["state"] == "AwaitingApproval"

    # no policy at all
    cluster.kube.delete(ADMISSION, "validatingadmissionpolicybindings", None, binding)
    cluster.kube.delete(ADMISSION, "validatingadmissionpolicies", None, binding)
    approve(cluster, plan_hash)
    again = cluster.wait_run(RUN, lambda o: "approval" not in o["status"] and any(
        "no ValidatingAdmissionPolicy" in c["message"] for c in o["status"]["conditions"]))
    assert again["status"]["phase"] == "AwaitingApproval"
    with SagaLog(cluster.dsn, min_size=1, max_size=1).open(migrate=False) as saga_log:
        record = saga_log.require_run(logged(RUN)).pivot
    assert record is not None and record.state == "AwaitingApproval" and not record.decided_by


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


def test_an_agentrun_naming_another_namespaces_run_sees_and_decides_nothing(
        cluster: Cluster) -> None:
    """A run of namespace `default` (bound by its pod there); an AgentRun in `sandbox` naming it
    gets RunLinked=False and no plan; an approver of `sandbox` cannot approve it (the admission
    policy: there is no staged plan to name), and an approval that got there anyway (a policy
    in Warn mode: written straight to storage) is consumed without recording anything."""
    plan_hash = staged_run(cluster)
    created = cluster.kube.kubectl("apply", "-f", "-", input=json.dumps(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "sandbox"}}))
    assert created.returncode == 0, created.stderr
    bind_user(cluster.kube, "sandbox", "mallory-approves", "ClusterRole", APPROVER_ROLE,
              "mallory")
    manifest = {"apiVersion": "agentsaga.io/v1alpha1", "kind": "AgentRun",
                "metadata": {"name": "borrowed", "namespace": "sandbox"},
                "spec": {"agent": "mallory", "runId": RUN}}
    applied = cluster.kube.kubectl("apply", "-f", "-", input=json.dumps(manifest))
    assert applied.returncode == 0, applied.stderr
    linked = cluster.kube.wait_for(
        "agentsaga.io/v1alpha1", "agentruns", "sandbox", "borrowed",
        lambda o: o is not None and any(c.get("reason") == "RunInOtherNamespace" for c in
                                        (o.get("status") or {}).get("conditions") or []), 20)
    assert linked is not None and "pivot" not in linked["status"]
    body = {"status": {"approval": {"planHash": plan_hash, "decision": "Approved",
                                    "approver": "mallory"}}}
    patched = cluster.kube.kubectl("-n", "sandbox", "patch", "agentrun", "borrowed",
                                   "--subresource=status", "--type=merge", "-p",
                                   json.dumps(body),
                                   kubeconfig=person_kubeconfig(cluster.kube, "mallory"))
    assert patched.returncode != 0
    assert "status.approval.planHash must equal status.pivot.planHash" in patched.stderr
    cluster.write_status_as_operator("borrowed", body["status"], namespace="sandbox")
    cluster.kube.wait_for("agentsaga.io/v1alpha1", "agentruns", "sandbox", "borrowed",
                          lambda o: o is not None and "approval" not in o.get("status", {}), 20)
    with SagaLog(cluster.dsn, min_size=1, max_size=1).open(migrate=False) as saga_log:
        record = saga_log.require_run(logged(RUN)).pivot
    assert record is not None and record.state == "AwaitingApproval"

    # sandbox runs its own `refund-3001` (a run id is unique within its namespace): the
    # operator makes its AgentRun there, and `borrowed` now shows sandbox's run, not default's
    with SagaLog(cluster.dsn, min_size=1, max_size=1).open(migrate=False) as saga_log:
        saga_log.begin_run(log_run_id("sandbox", RUN), agent="tester", owner="tester-0",
                           pod_uid="uid-sandbox", namespace="sandbox")
    # the bind writes `pod` and the epoch together; the AgentRun's own handler may show the
    # log's epoch first (it reads the log too), so the test waits for the pod
    own = cluster.kube.wait_for(
        "agentsaga.io/v1alpha1", "agentruns", "sandbox", RUN,
        lambda o: o is not None and "pod" in (o.get("status") or {}), 20)
    assert own is not None and own["spec"]["runId"] == RUN
    assert own["status"]["ownerEpoch"] == 1
    assert own["status"]["pod"] == {"name": "tester-0", "uid": "uid-sandbox",
                                    "namespace": "sandbox"}
    relinked = cluster.kube.wait_for(
        "agentsaga.io/v1alpha1", "agentruns", "sandbox", "borrowed",
        lambda o: o is not None and any(
            c.get("type") == "RunLinked" and c.get("status") == "True"
            for c in (o.get("status") or {}).get("conditions") or []), 20)
    assert relinked is not None and "pivot" not in relinked["status"]
    theirs = cluster.wait_run(RUN, lambda o: True)  # default's own AgentRun is untouched
    assert theirs["status"]["pivot"]["state"] == "AwaitingApproval"
    assert theirs["status"]["pod"]["namespace"] == "default"


def test_no_approval_is_recorded_where_the_deny_binding_does_not_apply(
        cluster: Cluster) -> None:
    """The binding is narrowed to namespaces labelled `policed`, which this one is not: there
    the approver's name goes unchecked, so the operator records no approval, and says which
    binding leaves the namespace out. Labelled, the namespace is covered again."""
    plan_hash = staged_run(cluster)
    binding = "saga-agentsaga-approval"
    policed = {"namespaceSelector": {"matchLabels": {"policed": "true"}}}
    cluster.kube.patch(ADMISSION, "validatingadmissionpolicybindings", None, binding,
                       {"spec": {"matchResources": policed}})
    approve(cluster, plan_hash)
    untrusted = cluster.wait_run(RUN, lambda o: "approval" not in o["status"])
    condition = next(c for c in untrusted["status"]["conditions"]
                     if c["type"] == "PivotApproved")
    assert (condition["status"], condition["reason"]) == ("False", "ApprovalUntrusted")
    assert "applies to AgentRuns in namespace default" in condition["message"]
    assert untrusted["status"]["pivot"]["state"] == "AwaitingApproval"
    with SagaLog(cluster.dsn, min_size=1, max_size=1).open(migrate=False) as saga_log:
        record = saga_log.require_run(logged(RUN)).pivot
    assert record is not None and (record.state, record.decision) == (
        "AwaitingApproval", "")  # nothing recorded

    labelled = cluster.kube.kubectl("label", "namespace", "default", "policed=true")
    assert labelled.returncode == 0, labelled.stderr
    approve(cluster, plan_hash)
    approved = cluster.wait_run(RUN, lambda o: (o["status"].get("pivot") or {}).get("state")
                                == "Approved")
    assert approved["status"]["pivot"]["decidedBy"] == "alice"



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
