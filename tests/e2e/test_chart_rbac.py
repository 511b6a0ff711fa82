"""The chart's RBAC and approval policy, enforced by the API stand-in, exercised with the real
kubectl 1.37 impersonating each identity (`--as`, `--as-group`): the agent pod's ServiceAccount,
a user without the approver role, an approver, the operator.

The chart is rendered with `sidecar.namespaces={agents}`; every Role, ClusterRole, binding,
ServiceAccount and the ValidatingAdmissionPolicy with its binding are applied as they are. The
AgentRun's staged pivot is written as ground truth (what the operator writes from the log)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from sagatest.chart_rbac import APPROVER_ROLE, OPERATOR, RELEASE_NS, bind_user, install_chart_rbac
from sagatest.chart_tools import CHART
from sagatest.kube_fixtures import Kube

AR = "agentsaga.io/v1alpha1"
NS = "agents"
RUN = "refund-4711"
PLAN = "c" * 64
AGENT = f"system:serviceaccount:{NS}:agentsaga-sidecar"


@pytest.fixture
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kube]:
    kube = Kube(tmp_path_factory.mktemp("kube")).start()
    try:
        for crd in sorted((CHART / "crds").glob("*.yaml")):
            kube.apply_file(crd)
        install_chart_rbac(kube, [NS])
        bind(kube, "alice-approves", "ClusterRole", APPROVER_ROLE, "alice")
        kube.create({"apiVersion": AR, "kind": "AgentRun",
                     "metadata": {"name": RUN, "namespace": NS},
                     "spec": {"agent": "refunder"}})
        kube.patch_status(AR, "agentruns", NS, RUN, {
            "phase": "AwaitingApproval",
            "pivot": {"state": "AwaitingApproval", "planHash": PLAN,
                      "commit": [{"tool": "capture_charge", "class": "irreversible"}]}})
        yield kube
    finally:
        kube.stop()


def bind(kube: Kube, name: str, kind: str, role: str, user: str) -> None:
    bind_user(kube, NS, name, kind, role, user)


def approval(approver: str, plan_hash: str = PLAN) -> str:
    return json.dumps({"status": {"approval": {"planHash": plan_hash, "decision": "Approved",
                                               "approver": approver, "reason": "ok"}}})


def patch_as(kube: Kube, who: list[str], body: str, *, status: bool = True,
             namespace: str = NS) -> Any:
    args = [*(f"--as={w}" if i == 0 else f"--as-group={w}" for i, w in enumerate(who)),
            "-n", namespace, "patch", "agentrun", RUN, "--type=merge", "-p", body]
    if status:
        args.insert(len(who) + 3, "--subresource=status")
    return kube.kubectl(*args)


def stored_approval(kube: Kube) -> Any:
    run = kube.get(AR, "agentruns", NS, RUN)
    assert run is not None
    return run.get("status", {}).get("approval")


def test_the_agent_pods_identity_cannot_approve_nor_change_its_run(cluster: Kube) -> None:
    who = [AGENT, "system:serviceaccounts", f"system:serviceaccounts:{NS}"]
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
        can = cluster.kubectl(f"--as={AGENT}", "-n", NS, "auth", "can-i", *verb)
        assert can.stdout.strip() == "no", (verb, can.stdout, can.stderr)
    assert stored_approval(cluster) is None
    run = cluster.get(AR, "agentruns", NS, RUN)
    assert run is not None and run["spec"].get("onOrphan") == "unwind"


def test_a_user_without_the_approver_role_cannot_approve(cluster: Kube) -> None:
    result = patch_as(cluster, ["mallory"], approval("mallory"))
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
    refused = patch_as(cluster, ["mallory"], approval("mallory"))
    assert refused.returncode != 0
    assert ("ValidatingAdmissionPolicy 'saga-agentsaga-approval' with binding "
            "'saga-agentsaga-approval' denied request: user mallory may not approve AgentRuns "
            f"in namespace {NS}") in refused.stderr
    assert stored_approval(cluster) is None


def test_an_approver_approves_only_as_themselves(cluster: Kube) -> None:
    impostor = patch_as(cluster, ["alice"], approval("bob"))
    assert impostor.returncode != 0
    assert ("status.approval.approver must be your own username (alice)"
            in impostor.stderr)
    stale = patch_as(cluster, ["alice"], approval("alice", "0" * 64))
    assert stale.returncode != 0 and "must equal status.pivot.planHash" in stale.stderr
    phase = patch_as(cluster, ["alice"], json.dumps({"status": {"phase": "Committing"}}))
    assert phase.returncode != 0 and "not status.phase" in phase.stderr
    spec = patch_as(cluster, ["alice"], json.dumps({"spec": {"onOrphan": "wait"}}),
                    status=False)
    assert spec.returncode != 0 and 'cannot patch resource "agentruns"' in spec.stderr
    elsewhere = patch_as(cluster, ["alice"], approval("alice"), namespace="default")
    assert elsewhere.returncode != 0
    assert stored_approval(cluster) is None

    approved = patch_as(cluster, ["alice"], approval("alice"))
    assert approved.returncode == 0, approved.stderr
    assert stored_approval(cluster)["approver"] == "alice"


def test_the_operator_alone_is_exempt_and_creates_jobs_only_in_agent_namespaces(
        cluster: Kube) -> None:
    who = [OPERATOR, "system:serviceaccounts", f"system:serviceaccounts:{RELEASE_NS}"]
    written = patch_as(cluster, who, json.dumps({"status": {
        "phase": "Committing", "pivot": {"state": "Approved", "decidedBy": "alice"}}}))
    assert written.returncode == 0, written.stderr
    for namespace, answer in ((NS, "yes"), ("default", "no"), (RELEASE_NS, "no")):
        can = cluster.kubectl(f"--as={OPERATOR}", "-n", namespace, "auth", "can-i", "create",
                              "jobs")
        assert can.stdout.strip() == answer, (namespace, can.stdout, can.stderr)
    for verb in (["delete", "jobs"], ["update", "agentruns"], ["update", "agentruns/status"]):
        can = cluster.kubectl(f"--as={OPERATOR}", "-n", NS, "auth", "can-i", *verb)
        assert can.stdout.strip() == "no", (verb, can.stdout)
    can = cluster.kubectl(f"--as={OPERATOR}", "auth", "can-i", "list",
                          "validatingadmissionpolicybindings.admissionregistration.k8s.io")
    assert can.stdout.strip() == "yes"


def test_a_warn_binding_lets_the_impostor_through_with_a_warning(cluster: Kube) -> None:
    cluster.patch("admissionregistration.k8s.io/v1", "validatingadmissionpolicybindings", None,
                  "saga-agentsaga-approval", {"spec": {"validationActions": ["Warn", "Audit"]}})
    impostor = patch_as(cluster, ["alice"], approval("bob"))
    assert impostor.returncode == 0, impostor.stderr
    assert ("Warning: Validation failed for ValidatingAdmissionPolicy 'saga-agentsaga-approval' "
            "with binding 'saga-agentsaga-approval': status.approval.approver must be your own "
            "username (alice)") in impostor.stderr
    assert [r.user for r in cluster.audit] == ["alice"]
    assert stored_approval(cluster)["approver"] == "bob"  # why the operator then records nothing
