"""R9 with kubectl: a correction the customer would read waits in status.corrections until a
human approves it there; the operator then starts the Job that sends it, once."""

from __future__ import annotations

import json

import pytest

from agentsaga.saga import corrections, pivot
from agentsaga.saga.resolution import unwind_run
from agentsaga.store import SagaLog
from sagatest import ledger_tools
from sagatest.ledger_tools import effects
from sagatest.operator_fixtures import Cluster, logged

# the module's tests share one cluster: each makes and changes objects in `default` only
pytestmark = pytest.mark.one_cluster_per_module

RUN = "apology-7"
EMAIL = {"to": "customer@example.com", "body": "Your refund is on its way."}


def decide(cluster: Cluster, step: int, decision: str, approver: str = "alice") -> None:
    body = {"status": {"corrections": {str(step): {"approval": {
        "decision": decision, "approver": approver, "reason": "the customer read it"}}}}}
    patched = cluster.kube.kubectl(f"--as={approver}", "patch", "agentrun", RUN,
                                   "--subresource=status", "--type=merge", "-p",
                                   json.dumps(body))
    assert patched.returncode == 0, patched.stderr


def test_customer_correction_is_sent_only_after_approval_by_kubectl(cluster: Cluster) -> None:
    cluster.apply_agentrun(RUN)
    cluster.start_operator("--standalone")
    agent = cluster.start_sidecar(cluster.create_pod("agent-0", RUN)).client()
    agent.begin_run(RUN, agent="refunder")
    agent.dispatch(RUN, "create_ticket", {"summary": "Refund for order 7", "order_id": "7"})
    staged = agent.reach_pivot(RUN, [{"tool": "send_email", "args": EMAIL}])
    saga_log = SagaLog(cluster.dsn, min_size=1, max_size=2).open()
    try:
        pivot.record_decision(saga_log, logged(RUN), staged.plan_hash, "Approved", "alice")
        agent.dispatch(RUN, "send_email", EMAIL)
        registry = ledger_tools.build_registry()
        report = unwind_run(saga_log, registry, logged(RUN), "unwind-job", recheck_pause_s=0.01)
    finally:
        saga_log.close()

    assert report.settled, report.to_json()
    assert [c["compensation"] for c in report.compensated] == ["close_ticket"], (
        report.to_json())
    [ticket] = effects(cluster.dsn, "ticket")
    assert ticket["closed"] is True

    proposed = cluster.wait_run(RUN, lambda o: ((o["status"].get("corrections") or {})
                                                .get("1") or {}).get("state") == "Proposed")
    assert proposed["status"]["corrections"]["1"]["tool"] == "send_email"
    assert effects(cluster.dsn, "correction") == [] and cluster.jobs() == []

    decide(cluster, 1, "Approved")
    job = cluster.wait_jobs(1)[0]
    command = job["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command == ["agentsaga", "corrections", "--run", logged(RUN), "--send"]
    decided = cluster.wait_run(RUN, lambda o: "approval" not in o["status"]["corrections"]["1"])
    assert decided["status"]["corrections"]["1"]["state"] == "Approved"
    assert decided["status"]["corrections"]["1"]["decidedBy"] == "alice"
    assert effects(cluster.dsn, "correction") == []  # the Job has not run yet

    ran = cluster.job_result(job)
    assert ran.returncode == 0 and ran.succeeded, ran.output
    # a pod may run twice (a node lost after the send, a Job re-created): still one correction
    again = cluster.create_job("corrections-again", *command)
    ran = cluster.job_result(again)
    assert ran.returncode == 0 and ran.succeeded, ran.output
    sent = effects(cluster.dsn, "correction")
    assert [(e["body"]["to"], e["body"]["body"]) for e in sent] == [
        ("customer@example.com", "Please disregard it.")]
    cluster.wait_run(RUN, lambda o: "1" not in (o["status"].get("corrections") or {}))

    # decided once: a late decision is refused by the admission policy (the entry is gone) and,
    # written straight to storage (a policy in Warn mode), by the operator
    late = {"1": {"approval": {"decision": "Rejected", "approver": "alice", "reason": "late"}}}
    patched = cluster.approver_kubectl("patch", "agentrun", RUN, "--subresource=status",
                                       "--type=merge", "-p",
                                       json.dumps({"status": {"corrections": late}}))
    assert patched.returncode != 0
    assert "may not add or remove status.corrections entries" in patched.stderr
    cluster.write_status_as_operator(RUN, {"corrections": late})
    refused = cluster.wait_run(RUN, lambda o: any(
        c["type"] == "CorrectionsDecided" and c["status"] == "False"
        for c in o["status"].get("conditions") or []))
    [decided_late] = [c for c in refused["status"]["conditions"]
                      if c["type"] == "CorrectionsDecided"]
    assert "not Proposed" in decided_late["message"]  # the condition: its handler's alone
    # the operator started no other Job (the test's re-run is not the run's)
    assert [j["metadata"]["name"] for j in cluster.jobs()
            if j["metadata"].get("ownerReferences")] == [job["metadata"]["name"]]


def test_a_correction_approved_without_its_job_gets_one_on_resync(cluster: Cluster) -> None:
    """The operator stopped between recording the decision and creating the Job (or the
    decision came from `agentsaga corrections --approve`): the resync creates it."""
    cluster.apply_agentrun(RUN)
    cluster.start_operator("--standalone")
    agent = cluster.start_sidecar(cluster.create_pod("agent-0", RUN)).client()
    agent.begin_run(RUN, agent="refunder")
    staged = agent.reach_pivot(RUN, [{"tool": "send_email", "args": EMAIL}])
    saga_log = SagaLog(cluster.dsn, min_size=1, max_size=2).open()
    try:
        pivot.record_decision(saga_log, logged(RUN), staged.plan_hash, "Approved", "alice")
        agent.dispatch(RUN, "send_email", EMAIL)
        report = unwind_run(saga_log, ledger_tools.build_registry(), logged(RUN), "unwind-job",
                            recheck_pause_s=0.01)
        assert report.settled, report.to_json()
        corrections.decide(saga_log, logged(RUN), 0, "Approved", "alice")
    finally:
        saga_log.close()
    job = cluster.wait_jobs(1)[0]
    assert job["spec"]["template"]["spec"]["containers"][0]["command"][1:3] == [
        "corrections", "--run"]
    assert cluster.job_result(job).succeeded
    assert len(effects(cluster.dsn, "correction")) == 1
