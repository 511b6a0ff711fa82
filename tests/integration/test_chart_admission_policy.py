"""The approver ValidatingAdmissionPolicy, evaluated with cel-python: the expressions are the ones
of the rendered manifest (matchConditions, variables, validations), never a copy. `authorizer` is a
small stand-in that answers `check('approve')` from a table of who may approve where."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import celpy
import pytest
from celpy import celtypes
from celpy.adapter import json_to_cel

from sagatest.chart_tools import one, render

OPERATOR = "system:serviceaccount:agentsaga-system:saga-agentsaga-operator"
SIDECAR = "system:serviceaccount:agentsaga-system:agentsaga-sidecar"
APPROVERS = {("alice", "agentsaga-system"), ("bob", "agentsaga-system")}
HASH = "9f2c41d7e0b3a6c5"


@dataclass
class Verdict:
    applied: bool
    allowed: bool
    messages: list[str]


@pytest.fixture(scope="module")
def policy() -> dict[str, Any]:
    docs = render()
    binding = one(docs, "ValidatingAdmissionPolicyBinding")
    vap = one(docs, "ValidatingAdmissionPolicy")
    assert binding["spec"]["policyName"] == vap["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]
    assert vap["spec"]["matchConstraints"]["resourceRules"] == [
        {
            "apiGroups": ["agentsaga.io"],
            "apiVersions": ["*"],
            "operations": ["UPDATE"],
            "resources": ["agentruns/status"],
        }
    ]
    spec: dict[str, Any] = vap["spec"]
    return spec


def _authorizer_functions(username: str) -> dict[str, Any]:
    """CEL's authorizer library: group().resource().namespace().name().check(verb).allowed()."""

    def step(field: str) -> Any:
        def call(target: Any, value: Any) -> celtypes.MapType:
            record = dict(target)
            record[celtypes.StringType(field)] = celtypes.StringType(str(value))
            return celtypes.MapType(record)

        return call

    def allowed(decision: Any) -> celtypes.BoolType:
        record = {str(k): str(v) for k, v in dict(decision).items()}
        ok = (
            record.get("group") == "agentsaga.io"
            and record.get("resource") == "agentruns"
            and record.get("check") == "approve"
            and (username, record.get("namespace")) in APPROVERS
        )
        return celtypes.BoolType(ok)

    functions = {f: step(f) for f in ("group", "resource", "namespace", "name", "check")}
    functions["allowed"] = allowed
    return functions


def admit(spec: dict[str, Any], username: str, old: dict[str, Any], new: dict[str, Any]) -> Verdict:
    env = celpy.Environment()
    functions = _authorizer_functions(username)
    activation: dict[str, Any] = {
        "object": json_to_cel(new),
        "oldObject": json_to_cel(old),
        "request": json_to_cel(
            {
                "operation": "UPDATE",
                "subResource": "status",
                "userInfo": {"username": username, "groups": ["system:authenticated"]},
            }
        ),
        "authorizer": celtypes.MapType({}),
    }

    def evaluate(expression: str) -> Any:
        program = env.program(env.compile(expression), functions=functions)
        return program.evaluate(activation)

    for condition in spec["matchConditions"]:
        if not evaluate(condition["expression"]):
            return Verdict(applied=False, allowed=True, messages=[])
    variables: dict[str, Any] = {}
    for variable in spec["variables"]:
        activation["variables"] = celtypes.MapType(variables)
        variables[celtypes.StringType(variable["name"])] = evaluate(variable["expression"])
    activation["variables"] = celtypes.MapType(variables)
    messages = []
    for validation in spec["validations"]:
        result = evaluate(validation["expression"])
        assert isinstance(result, celtypes.BoolType), (validation["expression"], result)
        if not result:
            text = (
                str(evaluate(validation["messageExpression"]))
                if "messageExpression" in validation
                else validation["message"]
            )
            messages.append(text)
    return Verdict(applied=True, allowed=not messages, messages=messages)


def staged_run() -> dict[str, Any]:
    return {
        "apiVersion": "agentsaga.io/v1alpha1",
        "kind": "AgentRun",
        "metadata": {"name": "refund-1182", "namespace": "agentsaga-system", "generation": 1},
        "spec": {"agent": "refund-agent"},
        "status": {
            "phase": "AwaitingApproval",
            "observedGeneration": 1,
            "ownerEpoch": 2,
            "steps": {"total": 3, "confirmed": 3},
            "pivot": {
                "state": "AwaitingApproval",
                "planHash": HASH,
                "commit": [{"tool": "stripe.capture", "class": "irreversible"}],
            },
            "conditions": [
                {
                    "type": "PivotApproved",
                    "status": "False",
                    "reason": "Staged",
                    "message": "awaiting approval",
                    "lastTransitionTime": "2026-12-02T15:00:00Z",
                }
            ],
            "corrections": {
                "3": {"tool": "email.send", "audience": ["customer"], "state": "Proposed"}
            },
        },
    }


def with_status(run: dict[str, Any], **changes: Any) -> dict[str, Any]:
    new = copy.deepcopy(run)
    new["status"].update(changes)
    return new


def approval(approver: str, plan_hash: str = HASH, decision: str = "Approved") -> dict[str, Any]:
    return {"planHash": plan_hash, "decision": decision, "approver": approver, "reason": "ok"}


def test_approver_may_approve_the_staged_plan_as_themselves(policy: dict[str, Any]) -> None:
    old = staged_run()
    verdict = admit(policy, "alice", old, with_status(old, approval=approval("alice")))
    assert verdict.applied and verdict.allowed, verdict.messages
    rejected = with_status(old, approval=approval("alice", decision="Rejected"))
    assert admit(policy, "alice", old, rejected).allowed


def test_approval_in_someone_elses_name_is_denied(policy: dict[str, Any]) -> None:
    old = staged_run()
    verdict = admit(policy, "bob", old, with_status(old, approval=approval("alice")))
    assert not verdict.allowed
    assert verdict.messages == [
        "status.approval.approver must be your own username (bob); an approval cannot be removed"
    ]


def test_approval_of_another_plan_is_denied(policy: dict[str, Any]) -> None:
    old = staged_run()
    verdict = admit(policy, "alice", old, with_status(old, approval=approval("alice", "0000")))
    assert verdict.messages == [
        "status.approval.planHash must equal status.pivot.planHash (the staged plan)"
    ]
    no_pivot = copy.deepcopy(old)
    del no_pivot["status"]["pivot"]
    verdict = admit(policy, "alice", no_pivot, with_status(no_pivot, approval=approval("alice")))
    assert not verdict.allowed


def test_only_holders_of_the_approve_verb_may_patch_status(policy: dict[str, Any]) -> None:
    old = staged_run()
    verdict = admit(policy, "mallory", old, with_status(old, approval=approval("mallory")))
    assert not verdict.allowed
    assert verdict.messages[0].startswith(
        "user mallory may not approve AgentRuns in namespace agentsaga-system"
    )


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("phase", "Committing"),
        (
            "pivot",
            {"state": "Approved", "planHash": HASH, "decision": "Approved", "decidedBy": "alice"},
        ),
        ("conditions", []),
        ("observedGeneration", 7),
        ("ownerEpoch", 3),
        ("steps", {"total": 0}),
        ("job", {"name": "unwind-refund-1182", "kind": "unwind"}),
        ("message", "approved by alice"),
    ],
)
def test_approvers_change_nothing_but_the_approval(
    policy: dict[str, Any], field: str, value: Any
) -> None:
    old = staged_run()
    new = with_status(old, approval=approval("alice"), **{field: value})
    verdict = admit(policy, "alice", old, new)
    assert not verdict.allowed
    assert verdict.messages == [
        "approvers may change only status.approval, status.corrections[*].approval and "
        f"status.settlements, not status.{field}"
    ]


def test_removing_an_approval_is_denied(policy: dict[str, Any]) -> None:
    old = with_status(staged_run(), approval=approval("alice"))
    new = copy.deepcopy(old)
    del new["status"]["approval"]
    assert not admit(policy, "alice", old, new).allowed
    # re-sending the same approval changes nothing and is allowed, even by another approver
    assert admit(policy, "bob", old, copy.deepcopy(old)).allowed


def test_corrections_are_approved_the_same_way(policy: dict[str, Any]) -> None:
    old = staged_run()
    corrections = copy.deepcopy(old["status"]["corrections"])
    corrections["3"]["approval"] = {"decision": "Approved", "approver": "alice", "reason": "send"}
    assert admit(policy, "alice", old, with_status(old, corrections=corrections)).allowed

    verdict = admit(policy, "bob", old, with_status(old, corrections=corrections))
    assert verdict.messages == [
        "status.corrections[*].approval.approver must be your own username (bob); "
        "an approval cannot be removed"
    ]

    sent = copy.deepcopy(corrections)
    sent["3"]["state"] = "Sent"
    verdict = admit(policy, "alice", old, with_status(old, corrections=sent))
    assert verdict.messages == [
        "approvers may change only status.approval, status.corrections[*].approval and "
        "status.settlements, not status.corrections[*].state"
    ]

    added = copy.deepcopy(corrections)
    added["4"] = {"tool": "zendesk.comment", "state": "Proposed"}
    verdict = admit(policy, "alice", old, with_status(old, corrections=added))
    assert verdict.messages == ["approvers may not add or remove status.corrections entries"]


def test_only_the_operator_is_not_matched(policy: dict[str, Any]) -> None:
    old = staged_run()
    new = with_status(old, phase="Committing", approval=approval("someone-else"))
    verdict = admit(policy, OPERATOR, old, new)
    assert verdict == Verdict(applied=False, allowed=True, messages=[])
    # the agents' ServiceAccount (the sidecar's) is matched and denied, as is a look-alike of the
    # operator in another namespace
    for username in (SIDECAR, "system:serviceaccount:team-x:saga-agentsaga-operator"):
        verdict = admit(policy, username, old, new)
        assert verdict.applied and not verdict.allowed


def test_the_operator_trusts_approvals_only_under_the_charts_policy_in_deny() -> None:
    from agentsaga.operator.approval_trust import untrusted

    docs = render()
    vap, binding = one(docs, "ValidatingAdmissionPolicy"), one(
        docs, "ValidatingAdmissionPolicyBinding")
    assert untrusted([vap], [binding]) is None
    warn = copy.deepcopy(binding)
    warn["spec"]["validationActions"] = ["Warn", "Audit"]
    assert "not bound with validationActions Deny" in str(untrusted([vap], [warn]))
    assert "no ValidatingAdmissionPolicy" in str(untrusted([], []))
    # a policy on AgentRuns that does not check who the approver is does not count
    loose = copy.deepcopy(vap)
    loose["spec"]["validations"] = [{"expression": "true"}]
    assert "no ValidatingAdmissionPolicy" in str(untrusted([loose], [binding]))
    off = render("--set", "admissionPolicy.enabled=false")
    assert not [d for d in off if d["kind"].startswith("ValidatingAdmissionPolicy")]


def test_the_operator_trusts_a_binding_only_where_it_applies() -> None:
    """A Deny binding scoped away from the AgentRun's namespace (or labels), a policy that fails
    open or whose match conditions could exempt a person: the approver's name is unchecked there,
    and the operator says which binding and why."""
    from agentsaga.operator.approval_trust import SETTLER, Scope, untrusted

    docs = render()
    vap, binding = one(docs, "ValidatingAdmissionPolicy"), one(
        docs, "ValidatingAdmissionPolicyBinding")

    def scope(namespace_labels: dict[str, str] | None = None,
              labels: dict[str, str] | None = None) -> Scope:
        return Scope("default", labels or {}, lambda: namespace_labels)

    assert untrusted([vap], [binding], scope=scope()) is None  # the chart's own, as it comes
    assert untrusted([vap], [binding], SETTLER, scope=scope()) is None

    def scoped(match: dict[str, Any]) -> dict[str, Any]:
        narrowed = copy.deepcopy(binding)
        narrowed["spec"]["matchResources"] = match
        return narrowed

    policed = scoped({"namespaceSelector": {"matchLabels": {"policed": "true"}}})
    why = str(untrusted([vap], [policed], scope=scope({})))
    assert "applies to AgentRuns in namespace default" in why
    assert "matchResources.namespaceSelector does not select namespace default" in why
    assert untrusted([vap], [policed], scope=scope({"policed": "true"})) is None
    assert "cannot read" in str(untrusted([vap], [policed], scope=scope(None)))
    # another binding of the same policy that does cover the namespace is enough
    assert untrusted([vap], [policed, binding], scope=scope({})) is None
    expressions = scoped({"namespaceSelector": {"matchExpressions": [
        {"key": "team", "operator": "NotIn", "values": ["payments"]}]}})
    assert untrusted([vap], [expressions], scope=scope({"team": "support"})) is None
    assert untrusted([vap], [expressions], scope=scope({"team": "payments"})) is not None
    labelled = scoped({"objectSelector": {"matchLabels": {"gated": "yes"}}})
    assert "objectSelector" in str(untrusted([vap], [labelled], scope=scope()))
    assert untrusted([vap], [labelled], scope=scope(labels={"gated": "yes"})) is None
    excluded = scoped({"excludeResourceRules": [{"apiGroups": ["agentsaga.io"],
                                                 "apiVersions": ["*"], "operations": ["*"],
                                                 "resources": ["agentruns/status"]}]})
    assert "excludeResourceRules" in str(untrusted([vap], [excluded], scope=scope()))
    elsewhere = scoped({"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["*"],
                                           "operations": ["UPDATE"],
                                           "resources": ["deployments"]}]})
    assert "resourceRules leave out" in str(untrusted([vap], [elsewhere], scope=scope()))

    fails_open = copy.deepcopy(vap)
    fails_open["spec"]["failurePolicy"] = "Ignore"
    assert "failurePolicy Ignore" in str(untrusted([fails_open], [binding], scope=scope()))
    exempting = copy.deepcopy(vap)
    exempting["spec"]["matchConditions"].append(
        {"name": "not-alice", "expression": "request.userInfo.username != 'alice'"})
    assert "could exempt a person" in str(untrusted([exempting], [binding], scope=scope()))


def settlement(settler: str, **extra: Any) -> dict[str, Any]:
    return {"outcome": "Happened", "ref": "SM123", "settler": settler,
            "reason": "delivery report", "stepKey": "9f" * 16, **extra}


def test_an_approver_settles_a_step_as_themselves(policy: dict[str, Any]) -> None:
    old = staged_run()
    new = with_status(old, settlements={"2": settlement("alice")})
    verdict = admit(policy, "alice", old, new)
    assert verdict.applied and verdict.allowed, verdict.messages


def test_a_settlement_in_someone_elses_name_is_denied(policy: dict[str, Any]) -> None:
    old = staged_run()
    verdict = admit(policy, "bob", old, with_status(old, settlements={"2": settlement("alice")}))
    assert verdict.messages == ["status.settlements[*].settler must be your own username (bob)"]


def test_a_non_approver_may_not_settle(policy: dict[str, Any]) -> None:
    old = staged_run()
    new = with_status(old, settlements={"2": settlement("mallory")})
    verdict = admit(policy, "mallory", old, new)
    assert not verdict.allowed
    assert verdict.messages[0].startswith(
        "user mallory may not approve AgentRuns in namespace agentsaga-system")


def test_a_settlement_cannot_claim_to_be_recorded_nor_be_changed(
        policy: dict[str, Any]) -> None:
    old = staged_run()
    claimed = with_status(old, settlements={"2": settlement("alice", state="Recorded")})
    assert admit(policy, "alice", old, claimed).messages == [
        "approvers may not set status.settlements[*].state or recordedAt: the operator records "
        "a settlement"]
    recorded = with_status(old, settlements={"2": settlement("alice", state="Recorded",
                                                             recordedAt="2026-12-03T12:00:00Z")})
    changed = with_status(old, settlements={"2": settlement("bob")})
    assert admit(policy, "bob", recorded, changed).messages == [
        "a settlement cannot be removed or changed once written"]
    removed = with_status(old, settlements={})
    assert admit(policy, "alice", recorded, removed).messages == [
        "a settlement cannot be removed or changed once written"]
    # another approver settles another step beside it
    beside = with_status(recorded, settlements={**recorded["status"]["settlements"],
                                                "3": settlement("bob")})
    assert admit(policy, "bob", recorded, beside).allowed
