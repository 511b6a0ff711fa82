"""Whether an approval can be trusted: R10's human gate holds only while the API server itself
binds `status.approval.approver` to the requesting user (and a person's settlement of a step,
only while it binds `status.settlements[*].settler`).

Without a ValidatingAdmissionPolicy that does so, bound with `validationActions: [Deny]`, the
approver name is free text that anyone allowed to patch `agentruns/status` can fill in (with
Warn or Audit nothing is refused). So before it records any approval — of the pivot or of a
correction — the operator reads the policies and bindings (the chart grants it get/list on them)
and, when no such pair is installed, records nothing and says why in a condition.

A policy counts when its matchConstraints cover UPDATE of `agentruns/status` in group
agentsaga.io and it enforces what the chart's own policy enforces, compared by meaning, not by
text: every CEL validation the chart renders is among its validations and every variable they
read is defined as the chart defines it (each expression compared as its CEL tokens, so only
layout may differ; `chart_policy`, generated from the chart), and it takes no parameters. A
validation `true || <the chart's>` is not the chart's and refuses nothing; more validations than
the chart's can only refuse more. A binding counts when it names such a policy with `Deny` among
its actions. And both must apply to the AgentRun at hand: a binding whose matchResources select
other namespaces or labels, or exclude agentruns/status, a policy that fails open
(`failurePolicy: Ignore`) or whose matchConditions could exempt a person, guards nothing there.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubernetes.client.exceptions import ApiException

from agentsaga.operator import chart_policy
from agentsaga.operator.config import GROUP, PLURAL
from agentsaga.operator.kube import KubeApi

Obj = dict[str, Any]
REASON = "ApprovalUntrusted"
FIX = ("install the chart's admission policy (admissionPolicy.enabled: true, "
       "admissionPolicy.validationActions: [Deny]) and write it again")


def _covers(values: list[str] | None, wanted: str) -> bool:
    return bool(values) and ("*" in (values or []) or wanted in (values or []))


APPROVER = "status.approval.approver"
SETTLER = "status.settlements[*].settler"


def guards_approvals(policy: Obj, field: str = APPROVER) -> bool:
    """Does this ValidatingAdmissionPolicy bind `field` (approvals on AgentRuns, or
    settlements) to the requester? Only as the chart's own policy does (`enforcement_gap`)."""
    return covers_agentrun_status(policy) and enforcement_gap(policy) is None


def covers_agentrun_status(policy: Obj) -> bool:
    """Do the policy's matchConstraints name UPDATE of agentsaga.io's agentruns/status?"""
    rules = ((policy.get("spec") or {}).get("matchConstraints") or {}).get("resourceRules") or []
    return any(
        _covers(rule.get("apiGroups"), GROUP) and _covers(rule.get("operations"), "UPDATE")
        and any(r in (f"{PLURAL}/status", "*/status", "*/*") for r in rule.get("resources") or [])
        for rule in rules)


_CEL_TOKEN = re.compile(
    r"[rRbB]?'(?:[^'\\\n]|\\.)*'|[rRbB]?\"(?:[^\"\\\n]|\\.)*\""
    r"|[A-Za-z_][A-Za-z_0-9]*|[0-9][0-9A-Za-z_.]*|&&|\|\||==|!=|<=|>=|\S")


def tokens(expression: str) -> list[str]:
    """A CEL expression's tokens (string literals whole): what it says, whatever its layout."""
    found: list[str] = _CEL_TOKEN.findall(expression)
    return found


def normal(expression: str) -> str:
    """A CEL expression as its tokens joined by single spaces: two expressions that differ only
    in layout (line breaks, indentation, spaces) have the same normal form."""
    return " ".join(tokens(expression))


def enforcement_gap(policy: Obj) -> str | None:
    """Why this policy does not enforce what the chart's approval policy enforces, or None.
    Compared strictly: the chart's every validation present as it renders it (by `normal`
    form), every variable they read defined as the chart defines it, no parameters."""
    spec = policy.get("spec") or {}
    if spec.get("paramKind"):
        return ("it takes parameters (paramKind), which the chart's does not: a binding whose "
                "parameters are missing may let requests through")
    names = [str(v.get("name")) for v in spec.get("variables") or []]
    if len(names) != len(set(names)):
        return "it defines a variable twice"
    variables = {str(v.get("name")): normal(str(v.get("expression") or ""))
                 for v in spec.get("variables") or []}
    for name, expression in chart_policy.VARIABLES.items():
        if name not in variables:
            return f"it does not define the variable {name} that the chart's validations read"
        if variables[name] != expression:
            return (f"its variable {name} is `{_short(variables[name])}`, not the chart's "
                    f"`{_short(expression)}`")
    present = {normal(str(v.get("expression") or "")) for v in spec.get("validations") or []}
    missing = [e for e in chart_policy.VALIDATIONS if e not in present]
    if missing:
        return (f"{len(missing)} of the chart's {len(chart_policy.VALIDATIONS)} validations "
                f"are missing or changed (the first: `{_short(missing[0])}`)")
    return None


def _short(expression: str, limit: int = 160) -> str:
    return expression if len(expression) <= limit else expression[:limit - 3] + "..."


def untrusted(policies: list[Obj], bindings: list[Obj], field: str = APPROVER,
              scope: Scope | None = None, *, operator: str | None = None) -> str | None:
    """Why the name in `field` cannot be trusted with these policies and bindings, or None.
    With `scope` (the AgentRun at hand), a policy and a binding count only where they apply to
    it: a selector or an exclusion that leaves its namespace or its labels out, a match
    condition that exempts anyone but `operator` (this operator's own username, as the API
    server knows it; None: unknown, so no exemption is understood), or `failurePolicy: Ignore`
    makes them not count."""
    covering = [p for p in policies if covers_agentrun_status(p)]
    guarding = sorted(p["metadata"]["name"] for p in covering if guards_approvals(p, field))
    if not guarding and covering:
        why = "; ".join(f"{p['metadata']['name']}: {enforcement_gap(p)}" for p in covering)
        return (f"no ValidatingAdmissionPolicy enforces the chart's approval rules, so the name "
                f"in {field} is unchecked ({why}): {FIX}")
    if not guarding:
        return (f"no ValidatingAdmissionPolicy binds {field} to the requesting user, so the "
                f"name there is unchecked: {FIX}")
    denying = [b for b in bindings
               if (b.get("spec") or {}).get("policyName") in guarding
               and "Deny" in ((b.get("spec") or {}).get("validationActions") or [])]
    if not denying:
        return (f"ValidatingAdmissionPolicy {', '.join(guarding)} is not bound with "
                f"validationActions Deny (Warn and Audit refuse nothing), so the name in "
                f"{field} is unchecked: {FIX}")
    if scope is None:
        return None
    by_name = {p["metadata"]["name"]: p for p in policies}
    gaps = []
    for binding in denying:
        policy = by_name[binding["spec"]["policyName"]]
        gap = (_policy_gap(policy, scope, operator)
               or _selection_gap((binding.get("spec") or {}).get("matchResources") or {},
                                 scope))
        if gap is None:
            return None
        gaps.append(f"{binding['metadata']['name']}: {gap}")
    return (f"no Deny binding of ValidatingAdmissionPolicy {', '.join(guarding)} applies to "
            f"AgentRuns in namespace {scope.namespace} ({'; '.join(gaps)}), so the name in "
            f"{field} is unchecked there: {FIX}")


def check(kube: KubeApi, field: str = APPROVER, run: Obj | None = None) -> str | None:
    """Read the cluster's policies now: None when the name in `field` can be trusted (for
    `run`, the AgentRun at hand, when given), else why not."""
    try:
        policies, bindings = kube.admission_policies()
    except ApiException as exc:
        return (f"the operator cannot read ValidatingAdmissionPolicies ({exc.status} "
                f"{exc.reason}), so it cannot tell whether approvers are who they say: grant "
                "it get/list on validatingadmissionpolicies and their bindings (the chart does)")
    scope = None if run is None else Scope.of(kube, run)
    operator = None if run is None else kube.whoami()
    return untrusted(policies, bindings, field, scope, operator=operator)


# -- where a policy and its binding apply ----------------------------------------------------


@dataclass
class Scope:
    """The AgentRun an approval is written to: its namespace, its labels, and its namespace's
    labels (read only when a selector asks; None when they cannot be read)."""

    namespace: str
    labels: dict[str, str]
    namespace_labels: Callable[[], dict[str, str] | None]

    @classmethod
    def of(cls, kube: KubeApi, run: Obj) -> Scope:
        metadata = run.get("metadata") or {}
        namespace = str(metadata.get("namespace") or "")
        read: list[dict[str, str] | None] = []

        def namespace_labels() -> dict[str, str] | None:
            if not read:
                read.append(kube.namespace_labels(namespace))
            return read[0]
        return cls(namespace, dict(metadata.get("labels") or {}), namespace_labels)


_EXEMPTS_ONE_USER = re.compile(
    r"^\s*request\.userInfo\.username\s*!=\s*(['\"])(?P<user>[^'\"]+)\1\s*$")


def exempted_user(expression: str) -> str | None:
    """The one user a match condition `request.userInfo.username != '<user>'` exempts, else
    None (an expression not understood, which could exempt anyone)."""
    found = _EXEMPTS_ONE_USER.match(expression)
    return None if found is None else found.group("user")


def _policy_gap(policy: Obj, scope: Scope, operator: str | None) -> str | None:
    spec = policy.get("spec") or {}
    name = policy["metadata"]["name"]
    if spec.get("failurePolicy", "Fail") != "Fail":
        return (f"policy {name} has failurePolicy "
                f"{spec.get('failurePolicy')}: a request it fails to evaluate passes")
    for condition in spec.get("matchConditions") or []:
        user = exempted_user(str(condition.get("expression") or ""))
        if user is None:
            return (f"policy {name} has matchCondition {condition.get('name')!r}, which could "
                    "exempt a person (only `request.userInfo.username != '<the operator's "
                    "ServiceAccount>'` is understood)")
        if user != operator:
            whom = f"the operator ({operator})" if operator else (
                "the operator (whose own username the operator could not learn)")
            return (f"policy {name} has matchCondition {condition.get('name')!r}, which exempts "
                    f"{user}, not {whom}: whoever holds that identity could approve as anyone")
    return _selection_gap(spec.get("matchConstraints") or {}, scope, policy_level=True)


def _selection_gap(match: Obj, scope: Scope, *, policy_level: bool = False) -> str | None:
    """Why `match` (a policy's matchConstraints or a binding's matchResources) leaves the
    AgentRun's status out, or None when it covers it."""
    where = "matchConstraints" if policy_level else "matchResources"
    if not policy_level and match.get("resourceRules") and not any(
            _rule_covers(rule) for rule in match["resourceRules"]):
        return f"its {where}.resourceRules leave out agentruns/status"
    if any(_rule_covers(rule) for rule in match.get("excludeResourceRules") or []):
        return f"its {where}.excludeResourceRules take agentruns/status out"
    objects = match.get("objectSelector") or {}
    if not selects(objects, scope.labels):
        return f"its {where}.objectSelector does not select this AgentRun's labels"
    namespaces = match.get("namespaceSelector") or {}
    if namespaces.get("matchLabels") or namespaces.get("matchExpressions"):
        labels = scope.namespace_labels()
        if labels is None:
            return (f"its {where}.namespaceSelector needs namespace {scope.namespace}'s labels, "
                    "which the operator cannot read (grant it get on namespaces)")
        if not selects(namespaces, labels):
            return f"its {where}.namespaceSelector does not select namespace {scope.namespace}"
    return None


def _rule_covers(rule: Obj) -> bool:
    """Whether a resource rule names UPDATE of agentsaga.io's agentruns/status (an exclusion
    that names only some AgentRuns, `resourceNames`, counts too: it may name this one)."""
    return (_covers(rule.get("apiGroups"), GROUP) and _covers(rule.get("operations"), "UPDATE")
            and any(r in (f"{PLURAL}/status", "*/status", "*/*", f"{PLURAL}/*", "*")
                    for r in rule.get("resources") or []))


def selects(selector: Obj, labels: dict[str, str]) -> bool:
    """A Kubernetes label selector (matchLabels, matchExpressions) against `labels`; an empty
    selector selects everything."""
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or []:
        key, operator = expression.get("key"), expression.get("operator")
        values = expression.get("values") or []
        present = key in labels
        if operator == "In" and not (present and labels[key] in values):
            return False
        if operator == "NotIn" and present and labels[key] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
        if operator not in ("In", "NotIn", "Exists", "DoesNotExist"):
            return False  # not understood: not taken as selecting
    return True
