"""Approvals by `kubectl patch` where the API server does not check the approver (the admission
policy's binding in Warn mode, deleted, or narrowed to other namespaces), and an AgentRun of
another namespace naming a run: each test changes what is cluster-wide, so each has a cluster
of its own."""

from __future__ import annotations

import json

from agentsaga.keys import log_run_id
from agentsaga.store import SagaLog
from sagatest.cluster.chart import APPROVER_ROLE, bind_user, person_kubeconfig
from sagatest.operator_fixtures import Cluster, logged
from sagatest.staged_runs import RUN, approve, staged_run

ADMISSION = "admissionregistration.k8s.io/v1"


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
