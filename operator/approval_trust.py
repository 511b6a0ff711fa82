"""Whether an approval can be trusted: R10's human gate holds only while the API server itself
binds `status.approval.approver` to the requesting user.

Without a ValidatingAdmissionPolicy that does so, bound with `validationActions: [Deny]`, the
approver name is free text that anyone allowed to patch `agentruns/status` can fill in (with
Warn or Audit nothing is refused). So before it records any approval — of the pivot or of a
correction — the operator reads the policies and bindings (the chart grants it get/list on them)
and, when no such pair is installed, records nothing and says why in a condition.

A policy counts when its matchConstraints cover UPDATE of `agentruns/status` in group
agentsaga.io and one of its validations compares a field to `request.userInfo.username`; a
binding counts when it names such a policy with `Deny` among its actions.
"""

from __future__ import annotations

from typing import Any

from agentsaga.operator.config import GROUP, PLURAL
from agentsaga.operator.kube import KubeApi
from kubernetes.client.exceptions import ApiException

Obj = dict[str, Any]
REASON = "ApprovalUntrusted"
FIX = ("install the chart's admission policy (admissionPolicy.enabled: true, "
       "admissionPolicy.validationActions: [Deny]) and approve again")


def _covers(values: list[str] | None, wanted: str) -> bool:
    return bool(values) and ("*" in (values or []) or wanted in (values or []))


def guards_approvals(policy: Obj) -> bool:
    """Does this ValidatingAdmissionPolicy bind approvals on AgentRuns to the requester?"""
    spec = policy.get("spec") or {}
    rules = (spec.get("matchConstraints") or {}).get("resourceRules") or []
    matched = any(
        _covers(rule.get("apiGroups"), GROUP) and _covers(rule.get("operations"), "UPDATE")
        and any(r in (f"{PLURAL}/status", "*/status", "*/*") for r in rule.get("resources") or [])
        for rule in rules)
    checks_user = any("request.userInfo.username" in (v.get("expression") or "")
                      and "approver" in (v.get("expression") or "")
                      for v in spec.get("validations") or [])
    return matched and checks_user


def untrusted(policies: list[Obj], bindings: list[Obj]) -> str | None:
    """Why approvals cannot be trusted with these policies and bindings, or None."""
    guarding = sorted(p["metadata"]["name"] for p in policies if guards_approvals(p))
    if not guarding:
        return ("no ValidatingAdmissionPolicy binds status.approval.approver to the requesting "
                f"user, so the approver's name is unchecked: {FIX}")
    denying = [b for b in bindings
               if (b.get("spec") or {}).get("policyName") in guarding
               and "Deny" in ((b.get("spec") or {}).get("validationActions") or [])]
    if not denying:
        return (f"ValidatingAdmissionPolicy {', '.join(guarding)} is not bound with "
                f"validationActions Deny (Warn and Audit refuse nothing): {FIX}")
    return None


def check(kube: KubeApi) -> str | None:
    """Read the cluster's policies now: None when approvals can be trusted, else why not."""
    try:
        policies, bindings = kube.admission_policies()
    except ApiException as exc:
        return (f"the operator cannot read ValidatingAdmissionPolicies ({exc.status} "
                f"{exc.reason}), so it cannot tell whether approvers are who they say: grant "
                "it get/list on validatingadmissionpolicies and their bindings (the chart does)")
    return untrusted(policies, bindings)
