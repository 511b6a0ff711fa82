"""The chart's RBAC and approval policy, enforced by a real API server (its RBAC authorizer, its
ValidatingAdmissionPolicy plugin compiling and evaluating the chart's CEL), exercised with the
real kubectl 1.37 by each identity with its own credentials: the agent pod's ServiceAccount and
the operator's (TokenRequest tokens), a user without the approver role and an approver (client
certificates).

The chart is installed by `helm install` with `sidecar.namespaces={agents}`. The AgentRun's
staged pivot is written by the admin as ground truth (what the operator writes from the log)."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest

from sagatest.cluster.chart import (
    APPROVER_ROLE,
    RELEASE_NS,
    bind_user,
    install_chart,
    operator_kubeconfig,
    person_kubeconfig,
)
from sagatest.cluster.kube import Kube

AR = "agentsaga.io/v1alpha1"
NS = "agents"
RUN = "refund-4711"
PLAN = "c" * 64
AGENT_SA = "agentsaga-sidecar"
AGENT = f"system:serviceaccount:{NS}:{AGENT_SA}"


@pytest.fixture
def cluster(kube: Kube) -> Kube:
    install_chart(kube, [NS])
    bind(kube, "alice-approves", "ClusterRole", APPROVER_ROLE, "alice")
    kube.create({"apiVersion": AR, "kind": "AgentRun",
                 "metadata": {"name": RUN, "namespace": NS},
                 "spec": {"agent": "refunder"}})
    staged = json.dumps({"status": {
        "phase": "AwaitingApproval",
        "pivot": {"state": "AwaitingApproval", "planHash": PLAN,
                  "commit": [{"tool": "capture_charge", "class": "irreversible"}]}}})
    # as the operator: the policy refuses a status change by anyone else, the admin included
    assert patch_as(kube, "operator", staged).returncode == 0
    return kube


def bind(kube: Kube, name: str, kind: str, role: str, user: str) -> None:
    bind_user(kube, NS, name, kind, role, user)


def credentials(kube: Kube, who: str) -> Path:
    """`agent` and `operator` are ServiceAccounts (TokenRequest tokens); anyone else a person
    with a client certificate."""
    if who == "agent":
        return kube.plane.service_account_kubeconfig(NS, AGENT_SA)
    if who == "operator":
        return operator_kubeconfig(kube)
    return person_kubeconfig(kube, who)


def approval(approver: str, plan_hash: str = PLAN) -> str:
    return json.dumps({"status": {"approval": {"planHash": plan_hash, "decision": "Approved",
                                               "approver": approver, "reason": "ok"}}})


def patch_as(kube: Kube, who: str, body: str, *, status: bool = True,
             namespace: str = NS, dry_run: bool = False) -> Any:
    args = ["-n", namespace, "patch", "agentrun", RUN, "--type=merge", "-p", body,
            *(["--subresource=status"] if status else []),
            *(["--dry-run=server"] if dry_run else [])]
    return kube.kubectl(*args, kubeconfig=credentials(kube, who))


def can_i(kube: Kube, who: str, namespace: str | None, *verb: str) -> str:
    where = ["-n", namespace] if namespace else []
    asked = kube.kubectl(*where, "auth", "can-i", *verb, kubeconfig=credentials(kube, who))
    return asked.stdout.strip()


def stored_approval(kube: Kube) -> Any:
    run = kube.get(AR, "agentruns", NS, RUN)
    assert run is not None
    return run.get("status", {}).get("approval")


def test_the_agent_pods_identity_cannot_approve_nor_change_its_run(cluster: Kube) -> None:
    who = "agent"
    result = patch_as(cluster, who, approval("alice"))
    assert result.returncode != 0
    assert re.search(f'User "{AGENT}" cannot (get|patch) resource "agentruns/status" in API '
                     f'group "agentsaga.io" in the namespace "{NS}"', result.stderr)
    for spec in ({"irreversibleBeforePivot": "count"}, {"onOrphan": "wait"}):
        changed = patch_as(cluster, who, json.dumps({"spec": spec}), status=False)
        assert changed.returncode != 0
        assert re.search('cannot (get|patch) resource "agentruns"', changed.stderr)
    annotated = patch_as(cluster, who, json.dumps({"metadata": {"annotations": {
        "agentsaga.io/force-delete": "true"}}}), status=False)
    assert annotated.returncode != 0
    # nor read its plan, nor create Jobs or AgentRuns
    for verb in (["get", "agentruns"], ["create", "jobs"], ["create", "agentruns"]):
        assert can_i(cluster, who, NS, *verb) == "no", verb
    assert stored_approval(cluster) is None
    run = cluster.get(AR, "agentruns", NS, RUN)
    assert run is not None and run["spec"].get("onOrphan") == "unwind"


def test_a_user_without_the_approver_role_cannot_approve(cluster: Kube) -> None:
    result = patch_as(cluster, "mallory", approval("mallory"))
    assert result.returncode != 0
    assert re.search('User "mallory" cannot (get|patch) resource "agentruns/status"',
                     result.stderr)
    # patch rights on status without the approve verb: the policy's authorizer check refuses
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "status-editor", "namespace": NS},
            "rules": [{"apiGroups": ["agentsaga.io"], "resources": ["agentruns/status"],
                       "verbs": ["get", "patch"]}]}
    cluster.create(role)
    bind(cluster, "mallory-edits", "Role", "status-editor", "mallory")
    refused = patch_as(cluster, "mallory", approval("mallory"))
    assert refused.returncode != 0
    assert ("ValidatingAdmissionPolicy 'saga-agentsaga-approval' with binding "
            "'saga-agentsaga-approval' denied request: user mallory may not approve AgentRuns "
            f"in namespace {NS}") in refused.stderr
    assert stored_approval(cluster) is None


def test_an_approver_approves_only_as_themselves(cluster: Kube) -> None:
    impostor = patch_as(cluster, "alice", approval("bob"))
    assert impostor.returncode != 0
    assert ("status.approval.approver must be your own username (alice)"
            in impostor.stderr)
    stale = patch_as(cluster, "alice", approval("alice", "0" * 64))
    assert stale.returncode != 0 and "must equal status.pivot.planHash" in stale.stderr
    phase = patch_as(cluster, "alice", json.dumps({"status": {"phase": "Committing"}}))
    assert phase.returncode != 0 and "not status.phase" in phase.stderr
    spec = patch_as(cluster, "alice", json.dumps({"spec": {"onOrphan": "wait"}}),
                    status=False)
    assert spec.returncode != 0 and 'cannot patch resource "agentruns"' in spec.stderr
    elsewhere = patch_as(cluster, "alice", approval("alice"), namespace="default")
    assert elsewhere.returncode != 0
    assert stored_approval(cluster) is None

    approved = patch_as(cluster, "alice", approval("alice"))
    assert approved.returncode == 0, approved.stderr
    assert stored_approval(cluster)["approver"] == "alice"


def test_the_operator_alone_is_exempt_and_creates_jobs_only_in_agent_namespaces(
        cluster: Kube) -> None:
    written = patch_as(cluster, "operator", json.dumps({"status": {
        "phase": "Committing", "pivot": {"state": "Approved", "decidedBy": "alice"}}}))
    assert written.returncode == 0, written.stderr
    for namespace, answer in ((NS, "yes"), ("default", "no"), (RELEASE_NS, "no")):
        assert can_i(cluster, "operator", namespace, "create", "jobs") == answer, namespace
    for verb in (["delete", "jobs"], ["update", "agentruns"], ["update", "agentruns/status"]):
        assert can_i(cluster, "operator", NS, *verb) == "no", verb
    assert can_i(cluster, "operator", None, "list", "validatingadmissionpolicybindings."
                 "admissionregistration.k8s.io") == "yes"


def test_a_warn_binding_lets_the_impostor_through_with_a_warning(cluster: Kube) -> None:
    cluster.patch("admissionregistration.k8s.io/v1", "validatingadmissionpolicybindings", None,
                  "saga-agentsaga-approval", {"spec": {"validationActions": ["Warn", "Audit"]}})
    # the changed binding takes effect a moment later: until a dry run passes
    deadline = time.monotonic() + 30
    while patch_as(cluster, "alice", approval("bob"), dry_run=True).returncode != 0:
        assert time.monotonic() < deadline, "the Warn binding never took effect"
        time.sleep(0.1)
    impostor = patch_as(cluster, "alice", approval("bob"))
    assert impostor.returncode == 0, impostor.stderr
    assert ("Warning: Validation failed for ValidatingAdmissionPolicy 'saga-agentsaga-approval' "
            "with binding 'saga-agentsaga-approval': status.approval.approver must be your own "
            "username (alice)") in impostor.stderr
    audited = [r.user for r in cluster.requests if "dryRun" not in r.query
               and "validation.policy.admission.k8s.io/validation_failure" in r.annotations]
    assert audited == ["alice"]
    assert stored_approval(cluster)["approver"] == "bob"  # why the operator then records nothing
