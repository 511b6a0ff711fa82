"""The chart's approval ValidatingAdmissionPolicy, compiled and evaluated by a real API server:
what an approver may change in an AgentRun's status, as themselves, and what no one but the
operator may change.

One control plane for the module with the chart installed by `helm install`; alice and bob hold
the chart's approver role in `agents`, mallory only a Role that may patch the status (so RBAC
lets her request through and the policy's authorizer check is what refuses her). Each case
stages the run's status as the operator (the only identity the policy does not match), then
sends the person's change with `kubectl patch --subresource=status --dry-run=server`: admission
runs in full and nothing is stored, so the cases share the run without touching each other.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sagatest.cluster.chart import (
    APPROVER_ROLE,
    RELEASE,
    bind_user,
    install_chart,
    operator_kubeconfig,
    person_kubeconfig,
)
from sagatest.cluster.control_plane import ControlPlane
from sagatest.cluster.kube import Kube

AR = "agentsaga.io/v1alpha1"
NS = "agents"
RUN = "refund-1182"
HASH = "9f2c41d7e0b3a6c5"
POLICY = f"{RELEASE}-agentsaga-approval"
DENIED = (f"ValidatingAdmissionPolicy '{POLICY}' with binding '{POLICY}' denied request: ")
ONLY_APPROVALS = ("approvers may change only status.approval, status.corrections[*].approval "
                  "and status.settlements, not ")


@pytest.fixture(scope="module")
def kube() -> Iterator[Kube]:
    with ControlPlane() as plane:
        kube = Kube(plane, plane.workdir)
        install_chart(kube, [NS])
        for person in ("alice", "bob"):
            bind_user(kube, NS, f"{person}-approves", "ClusterRole", APPROVER_ROLE, person)
        kube.create({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                     "metadata": {"name": "status-editor", "namespace": NS},
                     "rules": [{"apiGroups": ["agentsaga.io"],
                                "resources": ["agentruns/status"],
                                "verbs": ["get", "patch"]}]})
        bind_user(kube, NS, "mallory-edits", "Role", "status-editor", "mallory")
        kube.create({"apiVersion": AR, "kind": "AgentRun",
                     "metadata": {"name": RUN, "namespace": NS},
                     "spec": {"agent": "refund-agent"}})
        yield kube


def staged() -> dict[str, Any]:
    """A run awaiting the approval of its plan, with a proposed correction."""
    return {
        "phase": "AwaitingApproval",
        "observedGeneration": 1,
        "ownerEpoch": 2,
        "steps": {"total": 3, "confirmed": 3},
        "pivot": {"state": "AwaitingApproval", "planHash": HASH,
                  "commit": [{"tool": "stripe.capture", "class": "irreversible"}]},
        "conditions": [{"type": "PivotApproved", "status": "False", "reason": "Staged",
                        "message": "awaiting approval",
                        "lastTransitionTime": "2026-12-02T15:00:00Z"}],
        "corrections": {"3": {"tool": "email.send", "audience": ["customer"],
                              "state": "Proposed"}},
    }


def approval(approver: str, plan_hash: str = HASH, decision: str = "Approved") -> dict[str, Any]:
    return {"planHash": plan_hash, "decision": decision, "approver": approver, "reason": "ok"}


def settlement(settler: str, **extra: Any) -> dict[str, Any]:
    return {"outcome": "Happened", "ref": "SM123", "settler": settler,
            "reason": "delivery report", "stepKey": "9f" * 16, **extra}


def credentials(kube: Kube, who: str) -> Path:
    if who == "operator":
        return operator_kubeconfig(kube)
    if who.startswith("system:serviceaccount:"):
        namespace, name = who.split(":")[2:]
        return kube.plane.service_account_kubeconfig(namespace, name)
    return person_kubeconfig(kube, who)


def replace_status(kube: Kube, who: str, status: dict[str, Any],
                   dry_run: bool = False) -> Any:
    return kube.kubectl("-n", NS, "patch", "agentrun", RUN, "--subresource=status",
                        "--type=json", "-p", json.dumps([{"op": "replace", "path": "/status",
                                                          "value": status}]),
                        *(["--dry-run=server"] if dry_run else []),
                        kubeconfig=credentials(kube, who))


def admit(kube: Kube, who: str, old: dict[str, Any], new: dict[str, Any]) -> str | None:
    """Stage `old` as the operator, then ask the API server whether `who` may make it `new`:
    None if admitted, else the policy's message."""
    staging = replace_status(kube, "operator", old)
    assert staging.returncode == 0, staging.stderr
    asked = replace_status(kube, who, new, dry_run=True)
    if asked.returncode == 0:
        return None
    assert DENIED in asked.stderr, asked.stderr  # refused by the policy, not by RBAC
    return str(asked.stderr.split(DENIED, 1)[1].strip())


def changed(status: dict[str, Any], **changes: Any) -> dict[str, Any]:
    new = copy.deepcopy(status)
    new.update(changes)
    return new


def test_an_approver_approves_or_rejects_the_staged_plan_as_themselves(kube: Kube) -> None:
    old = staged()
    assert admit(kube, "alice", old, changed(old, approval=approval("alice"))) is None
    assert admit(kube, "alice", old, changed(old, approval=approval(
        "alice", decision="Rejected"))) is None


def test_an_approval_in_someone_elses_name_is_denied(kube: Kube) -> None:
    old = staged()
    assert admit(kube, "bob", old, changed(old, approval=approval("alice"))) == (
        "status.approval.approver must be your own username (bob); an approval cannot be "
        "removed")


def test_an_approval_of_another_plan_or_of_no_plan_is_denied(kube: Kube) -> None:
    old = staged()
    assert admit(kube, "alice", old, changed(old, approval=approval("alice", "0000"))) == (
        "status.approval.planHash must equal status.pivot.planHash (the staged plan)")
    no_pivot = staged()
    del no_pivot["pivot"]
    assert admit(kube, "alice", no_pivot, changed(no_pivot, approval=approval("alice")))


def test_patch_rights_without_the_approve_verb_approve_nothing(kube: Kube) -> None:
    old = staged()
    why = admit(kube, "mallory", old, changed(old, approval=approval("mallory")))
    assert why is not None and why.startswith(
        f"user mallory may not approve AgentRuns in namespace {NS}")


@pytest.mark.parametrize(("field", "value"), [
    ("phase", "Committing"),
    ("pivot", {"state": "Approved", "planHash": HASH, "decision": "Approved",
               "decidedBy": "alice"}),
    ("conditions", []),
    ("observedGeneration", 7),
    ("ownerEpoch", 3),
    ("steps", {"total": 0}),
    ("job", {"name": "unwind-refund-1182", "kind": "unwind"}),
    ("message", "approved by alice"),
])
def test_approvers_change_nothing_but_the_approval(kube: Kube, field: str, value: Any) -> None:
    old = staged()
    new = changed(old, approval=approval("alice"), **{field: value})
    assert admit(kube, "alice", old, new) == ONLY_APPROVALS + f"status.{field}"


def test_an_approval_cannot_be_removed_but_may_be_sent_again(kube: Kube) -> None:
    old = changed(staged(), approval=approval("alice"))
    removed = copy.deepcopy(old)
    del removed["approval"]
    assert admit(kube, "alice", old, removed)
    # re-sending the same status changes nothing and is admitted, whoever sends it
    assert admit(kube, "bob", old, copy.deepcopy(old)) is None


def test_corrections_are_approved_the_same_way(kube: Kube) -> None:
    old = staged()
    corrections = copy.deepcopy(old["corrections"])
    corrections["3"]["approval"] = {"decision": "Approved", "approver": "alice",
                                    "reason": "send"}
    assert admit(kube, "alice", old, changed(old, corrections=corrections)) is None
    assert admit(kube, "bob", old, changed(old, corrections=corrections)) == (
        "status.corrections[*].approval.approver must be your own username (bob); an "
        "approval cannot be removed")
    sent = copy.deepcopy(corrections)
    sent["3"]["state"] = "Sent"
    assert admit(kube, "alice", old, changed(old, corrections=sent)) == (
        ONLY_APPROVALS + "status.corrections[*].state")
    added = copy.deepcopy(corrections)
    added["4"] = {"tool": "zendesk.comment", "state": "Proposed"}
    assert admit(kube, "alice", old, changed(old, corrections=added)) == (
        "approvers may not add or remove status.corrections entries")


def test_only_the_charts_operator_is_not_matched(kube: Kube) -> None:
    old = staged()
    new = changed(old, phase="Committing", approval=approval("someone-else"))
    assert admit(kube, "operator", old, new) is None
    # the agents' ServiceAccount and a look-alike of the operator in another namespace, both
    # given the right to patch the status, are matched and refused
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-x"}})
    look_alike = "system:serviceaccount:team-x:saga-agentsaga-operator"
    agent = f"system:serviceaccount:{NS}:agentsaga-sidecar"
    for who in (agent, look_alike):
        namespace, name = who.split(":")[2:]
        if kube.get("v1", "serviceaccounts", namespace, name) is None:
            kube.create({"apiVersion": "v1", "kind": "ServiceAccount",
                         "metadata": {"name": name, "namespace": namespace}})
        kube.create({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                     "metadata": {"name": f"{namespace}-{name}-edits", "namespace": NS},
                     "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                 "name": "status-editor"},
                     "subjects": [{"kind": "ServiceAccount", "name": name,
                                   "namespace": namespace}]})
        why = admit(kube, who, old, new)
        assert why is not None and why.startswith(f"user {who} may not approve"), (who, why)


def test_an_approver_settles_a_step_as_themselves_only(kube: Kube) -> None:
    old = staged()
    assert admit(kube, "alice", old, changed(old, settlements={"2": settlement("alice")})) \
        is None
    assert admit(kube, "bob", old, changed(old, settlements={"2": settlement("alice")})) == (
        "status.settlements[*].settler must be your own username (bob)")
    why = admit(kube, "mallory", old, changed(old, settlements={"2": settlement("mallory")}))
    assert why is not None and why.startswith(
        f"user mallory may not approve AgentRuns in namespace {NS}")


def test_a_settlement_cannot_claim_to_be_recorded_nor_be_changed(kube: Kube) -> None:
    old = staged()
    claimed = changed(old, settlements={"2": settlement("alice", state="Recorded")})
    assert admit(kube, "alice", old, claimed) == (
        "approvers may not set status.settlements[*].state or recordedAt: the operator "
        "records a settlement")
    recorded = changed(old, settlements={"2": settlement(
        "alice", state="Recorded", recordedAt="2026-12-03T12:00:00Z")})
    once_written = "a settlement cannot be removed or changed once written"
    assert admit(kube, "bob", recorded, changed(old, settlements={
        "2": settlement("bob")})) == once_written
    assert admit(kube, "alice", recorded, changed(old, settlements={})) == once_written
    # another approver settles another step beside it
    beside = changed(recorded, settlements={**recorded["settlements"], "3": settlement("bob")})
    assert admit(kube, "bob", recorded, beside) is None
