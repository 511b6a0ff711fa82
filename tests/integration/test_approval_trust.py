"""Whether the operator trusts the approvals in AgentRuns: only under the chart's approval policy,
bound with Deny where the run lives, failing closed and exempting no person (`approval_trust`,
checked against the rendered chart and variations of it). The policy itself is evaluated by a
real API server in tests/e2e/test_approval_policy.py."""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from typing import Any

import pytest

from sagatest.chart_tools import find, one, render


def operator_user(docs: list[dict[str, Any]]) -> str:
    """The username of the chart's operator, from its rendered ServiceAccount."""
    (account,) = [d for d in find(docs, "ServiceAccount")
                  if d["metadata"]["labels"].get("app.kubernetes.io/component") == "operator"]
    return f"system:serviceaccount:{account['metadata']['namespace']}:{account['metadata']['name']}"


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

    me = operator_user(docs)
    checked = functools.partial(untrusted, operator=me)
    assert checked([vap], [binding], scope=scope()) is None  # the chart's own, as it comes
    assert checked([vap], [binding], SETTLER, scope=scope()) is None

    def scoped(match: dict[str, Any]) -> dict[str, Any]:
        narrowed = copy.deepcopy(binding)
        narrowed["spec"]["matchResources"] = match
        return narrowed

    policed = scoped({"namespaceSelector": {"matchLabels": {"policed": "true"}}})
    why = str(checked([vap], [policed], scope=scope({})))
    assert "applies to AgentRuns in namespace default" in why
    assert "matchResources.namespaceSelector does not select namespace default" in why
    assert checked([vap], [policed], scope=scope({"policed": "true"})) is None
    assert "cannot read" in str(checked([vap], [policed], scope=scope(None)))
    # another binding of the same policy that does cover the namespace is enough
    assert checked([vap], [policed, binding], scope=scope({})) is None
    expressions = scoped({"namespaceSelector": {"matchExpressions": [
        {"key": "team", "operator": "NotIn", "values": ["payments"]}]}})
    assert checked([vap], [expressions], scope=scope({"team": "support"})) is None
    assert checked([vap], [expressions], scope=scope({"team": "payments"})) is not None
    labelled = scoped({"objectSelector": {"matchLabels": {"gated": "yes"}}})
    assert "objectSelector" in str(checked([vap], [labelled], scope=scope()))
    assert checked([vap], [labelled], scope=scope(labels={"gated": "yes"})) is None
    excluded = scoped({"excludeResourceRules": [{"apiGroups": ["agentsaga.io"],
                                                 "apiVersions": ["*"], "operations": ["*"],
                                                 "resources": ["agentruns/status"]}]})
    assert "excludeResourceRules" in str(checked([vap], [excluded], scope=scope()))
    elsewhere = scoped({"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["*"],
                                           "operations": ["UPDATE"],
                                           "resources": ["deployments"]}]})
    assert "resourceRules leave out" in str(checked([vap], [elsewhere], scope=scope()))

    fails_open = copy.deepcopy(vap)
    fails_open["spec"]["failurePolicy"] = "Ignore"
    assert "failurePolicy Ignore" in str(checked([fails_open], [binding], scope=scope()))
    exempting = copy.deepcopy(vap)
    exempting["spec"]["matchConditions"].append(
        {"name": "not-alice", "expression": "request.userInfo.username != 'alice'"})
    assert "which exempts alice, not the operator" in str(
        checked([exempting], [binding], scope=scope()))
    opaque = copy.deepcopy(vap)
    opaque["spec"]["matchConditions"] = [{"name": "x", "expression": "!('a' in request)"}]
    assert "could exempt a person" in str(checked([opaque], [binding], scope=scope()))


def test_the_operator_trusts_a_policy_that_exempts_only_itself() -> None:
    """The policy may exempt the chart's operator (the only writer of AgentRuns) and no one
    else: exempting any other ServiceAccount (the original critical misconfiguration), or the
    operator when it cannot tell who it is, makes approvals untrusted, naming whom."""
    from agentsaga.operator.approval_trust import Scope, untrusted

    docs = render()
    vap, binding = one(docs, "ValidatingAdmissionPolicy"), one(
        docs, "ValidatingAdmissionPolicyBinding")
    me = operator_user(docs)
    here = Scope("default", {}, lambda: {})
    assert untrusted([vap], [binding], scope=here, operator=me) is None
    for other in ("system:serviceaccount:agents:agentsaga-sidecar",
                  "system:serviceaccount:kube-system:default",
                  "system:serviceaccount:agentsaga-system:agentsaga-operator-old"):
        exempting = copy.deepcopy(vap)
        exempting["spec"]["matchConditions"] = [
            {"name": "not-the-operator",
             "expression": f"request.userInfo.username != '{other}'"}]
        why = str(untrusted([exempting], [binding], scope=here, operator=me))
        assert f"which exempts {other}, not the operator ({me})" in why
    # exempting the operator and another as well: the other still could approve as anyone
    both = copy.deepcopy(vap)
    both["spec"]["matchConditions"].append(
        {"name": "not-ci", "expression": "request.userInfo.username != "
                                         "'system:serviceaccount:ci:deployer'"})
    assert "exempts system:serviceaccount:ci:deployer" in str(
        untrusted([both], [binding], scope=here, operator=me))
    # an operator that cannot learn its own name trusts no exemption
    assert "could not learn" in str(untrusted([vap], [binding], scope=here, operator=None))


def test_the_operator_knows_what_the_charts_policy_enforces() -> None:
    """operator/chart_policy.py is what the chart renders (tools/gen_chart_policy.py)."""
    import importlib.util
    from pathlib import Path

    tool_path = Path(__file__).resolve().parents[2] / "tools" / "gen_chart_policy.py"
    spec = importlib.util.spec_from_file_location("gen_chart_policy", tool_path)
    assert spec is not None and spec.loader is not None
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    assert tool.TARGET.read_text() == tool.source(one(render(), "ValidatingAdmissionPolicy")), (
        "run python -P tools/gen_chart_policy.py")


def _changed(vap: dict[str, Any], change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    variant = copy.deepcopy(vap)
    change(variant["spec"])
    return variant


def _weaken_approver_check(spec: dict[str, Any]) -> None:
    [check] = [v for v in spec["validations"]
               if "newStatus.approval.approver ==" in v["expression"]]
    check["expression"] = "true || " + check["expression"]


def _approver_variable_empty(spec: dict[str, Any]) -> None:
    [variable] = [v for v in spec["variables"] if v["name"] == "newStatus"]
    variable["expression"] = "{}"


@pytest.mark.parametrize(("change", "why"), [
    (_weaken_approver_check, "1 of the chart's 30 validations are missing or changed (the "
                             "first: `! variables . approvalChanged || ( has ( variables"),
    (lambda spec: spec["validations"].pop(0), "1 of the chart's 30 validations are missing"),
    (lambda spec: spec.__setitem__("validations", [{"expression": "has(object.status.approval)"
                                                   " && object.status.approval.approver == "
                                                   "request.userInfo.username"}]),
     "30 of the chart's 30 validations are missing"),
    (_approver_variable_empty, "its variable newStatus is `{ }`, not the chart's `has ( object"),
    (lambda spec: spec["variables"].pop(), "does not define the variable oldSettlements"),
    (lambda spec: spec["variables"].append(dict(spec["variables"][0])),
     "it defines a variable twice"),
    (lambda spec: spec.__setitem__("paramKind", {"apiVersion": "v1", "kind": "ConfigMap"}),
     "it takes parameters (paramKind)"),
])
def test_a_policy_that_enforces_less_than_the_charts_is_not_trusted(
        change: Callable[[dict[str, Any]], None], why: str) -> None:
    """Compared by what it enforces, not by its text: a validation `true || <the chart's>`
    names the requester and refuses nothing; so does a variable redefined to an empty status."""
    from agentsaga.operator.approval_trust import SETTLER, untrusted

    docs = render()
    vap, binding = one(docs, "ValidatingAdmissionPolicy"), one(
        docs, "ValidatingAdmissionPolicyBinding")
    variant = _changed(vap, change)
    for field in ("status.approval.approver", SETTLER):
        reason = str(untrusted([variant], [binding], field))
        assert reason.startswith("no ValidatingAdmissionPolicy enforces the chart's approval "
                                 f"rules, so the name in {field} is unchecked "
                                 f"({vap['metadata']['name']}: "), reason
        assert why in reason, reason
        assert reason.endswith("install the chart's admission policy (admissionPolicy.enabled: "
                               "true, admissionPolicy.validationActions: [Deny]) and write it "
                               "again")


def test_the_charts_policy_laid_out_otherwise_or_refusing_more_is_trusted() -> None:
    """Only layout may differ (line breaks, spaces, order); a validation more can only
    refuse more."""
    from agentsaga.operator.approval_trust import untrusted

    docs = render()
    vap, binding = one(docs, "ValidatingAdmissionPolicy"), one(
        docs, "ValidatingAdmissionPolicyBinding")

    def relaid(spec: dict[str, Any]) -> None:
        for item in [*spec["validations"], *spec["variables"]]:
            item["expression"] = "\n  " + item["expression"].replace(" ", "\n    ") + "  "
        spec["validations"].reverse()
        spec["validations"].append({"expression": "request.userInfo.username != 'mallory'"})

    assert untrusted([_changed(vap, relaid)], [binding]) is None
