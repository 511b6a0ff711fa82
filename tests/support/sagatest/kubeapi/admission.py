"""ValidatingAdmissionPolicies and their bindings, evaluated with cel-python (`celpy`).

For every write, each ValidatingAdmissionPolicyBinding whose policy matches the request
(matchConstraints.resourceRules with operations and `resource/subresource`, the binding's
matchResources, namespace and object label selectors) has its policy's matchConditions,
variables and validations evaluated with `object`, `oldObject`, `request` (the request's real
userInfo, operation, subResource, …), `namespaceObject` and `authorizer` — which answers
`group().resource().namespace().name().check(verb).allowed()` (and `.path().check()`) from the
stand-in's RBAC, as the real authorizer library does. `validationActions`: Deny refuses the
request with the validation's reason (Forbidden 403, Invalid 422, …), Warn adds a `Warning`
header, Audit records the message in `Admission.audit`. A policy whose expression fails to
evaluate is handled by its failurePolicy (Fail: refused).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import celpy
from celpy import celtypes
from celpy.adapter import json_to_cel
from celpy.evaluation import CELEvalError

from .auth import Attributes, Authorizer, UserInfo
from .errors import ApiError
from .selectors import label_selector_object

Obj = dict[str, Any]
GROUP = "admissionregistration.k8s.io"
CODES = {"Unauthorized": 401, "Forbidden": 403, "Invalid": 422, "RequestEntityTooLarge": 413}


@dataclass(frozen=True)
class Request:
    """One admission request (admission.k8s.io AdmissionRequest, the parts CEL reads)."""

    operation: str  # CREATE | UPDATE | DELETE
    group: str
    version: str
    resource: str
    subresource: str
    kind: str
    namespace: str
    name: str
    user: UserInfo
    dry_run: bool
    old: Obj | None
    new: Obj | None
    namespace_object: Obj | None

    def as_cel(self) -> Obj:
        return {
            "kind": {"group": self.group, "version": self.version, "kind": self.kind},
            "resource": {"group": self.group, "version": self.version,
                         "resource": self.resource},
            "subResource": self.subresource,
            "name": self.name,
            "namespace": self.namespace,
            "operation": self.operation,
            "userInfo": self.user.as_dict(),
            "dryRun": self.dry_run,
        }


@dataclass(frozen=True)
class AuditRecord:
    policy: str
    binding: str
    message: str
    user: str


def _rule_matches(rule: Obj, req: Request) -> bool:
    def has(values: list[str] | None, wanted: str) -> bool:
        return bool(values) and ("*" in (values or []) or wanted in (values or []))

    resource = req.resource + (f"/{req.subresource}" if req.subresource else "")
    resources = rule.get("resources") or []
    resource_ok = resource in resources or (
        not req.subresource and "*" in resources) or (
        bool(req.subresource) and (f"*/{req.subresource}" in resources or "*/*" in resources))
    return (has(rule.get("apiGroups"), req.group) and has(rule.get("apiVersions"), req.version)
            and has(rule.get("operations"), req.operation) and resource_ok)


def _resources_match(match: Obj | None, req: Request) -> bool:
    if not match:
        return True
    rules = match.get("resourceRules")
    if rules is not None and not any(_rule_matches(r, req) for r in rules):
        return False
    if any(_rule_matches(r, req) for r in match.get("excludeResourceRules") or []):
        return False
    ns_selector = match.get("namespaceSelector")
    if ns_selector and req.namespace and req.namespace_object is not None and not (
            label_selector_object(ns_selector)(req.namespace_object)):
        return False
    obj_selector = match.get("objectSelector")
    if obj_selector:
        selects = label_selector_object(obj_selector)
        if not any(o is not None and selects(o) for o in (req.new, req.old)):
            return False
    return True


def _authorizer_functions(authorizer: Authorizer, who: UserInfo) -> dict[str, Any]:
    """The CEL authorizer library over the stand-in's RBAC, for one requester."""

    def step(key: str) -> Callable[[Any, Any], celtypes.MapType]:
        def call(target: Any, value: Any) -> celtypes.MapType:
            record = dict(target)
            record[celtypes.StringType(key)] = celtypes.StringType(str(value))
            return celtypes.MapType(record)

        return call

    def check(target: Any, verb: Any) -> celtypes.MapType:
        record = {str(k): str(v) for k, v in dict(target).items()}
        attrs = Attributes(str(verb), record.get("group", ""), record.get("resource", ""),
                           record.get("subresource", ""), record.get("namespace", ""),
                           record.get("name", ""), record.get("path", ""))
        decision = "allow" if authorizer.allowed(who, attrs) else "deny"
        return celtypes.MapType({celtypes.StringType("decision"): celtypes.StringType(decision)})

    def allowed(decision: Any) -> celtypes.BoolType:
        return celtypes.BoolType(str(dict(decision)[celtypes.StringType("decision")]) == "allow")

    def denied(decision: Any) -> celtypes.BoolType:
        return celtypes.BoolType(not allowed(decision))

    functions: dict[str, Any] = {
        k: step(k) for k in ("group", "resource", "subresource", "namespace", "name", "path")}
    functions.update(check=check, allowed=allowed, denied=denied)
    return functions


@dataclass
class Admission:
    """Evaluates the stored policies and bindings for each request."""

    objects: Mapping[tuple[str, str], Mapping[tuple[str, str], Obj]]
    authorizer: Authorizer
    audit: list[AuditRecord] = field(default_factory=list)
    enabled: bool = True  # False: as with --disable-admission-plugins=ValidatingAdmissionPolicy
    _env: celpy.Environment = field(default_factory=celpy.Environment)
    _compiled: dict[str, Any] = field(default_factory=dict)

    def _policies(self) -> Mapping[tuple[str, str], Obj]:
        return self.objects.get((GROUP, "validatingadmissionpolicies"), {})

    def _bindings(self) -> list[Obj]:
        found = self.objects.get((GROUP, "validatingadmissionpolicybindings"), {})
        return [b for _, b in sorted(found.items())]

    def validate(self, req: Request) -> list[str]:
        """Raise ApiError for a Deny; return the Warning header values."""
        warnings: list[str] = []
        if not self.enabled:
            return warnings
        for binding in self._bindings():
            spec = binding.get("spec") or {}
            policy = self._policies().get(("", spec.get("policyName", "")))
            if policy is None:
                continue
            pspec = policy.get("spec") or {}
            if not _resources_match(pspec.get("matchConstraints"), req):
                continue
            if not _resources_match(spec.get("matchResources"), req):
                continue
            policy_name = policy["metadata"]["name"]
            binding_name = binding["metadata"]["name"]
            try:
                failure = self._evaluate(pspec, req)
            except CELEvalError as exc:
                if pspec.get("failurePolicy", "Fail") == "Ignore":
                    continue
                failure = (f"expression failed to evaluate: {exc}", "Invalid")
            if failure is None:
                continue
            message, reason = failure
            actions = spec.get("validationActions") or []
            if "Deny" in actions:
                raise ApiError(
                    CODES.get(reason, 422),
                    f"{req.resource}.{req.group} \"{req.name}\" is forbidden: "
                    f"ValidatingAdmissionPolicy '{policy_name}' with binding "
                    f"'{binding_name}' denied request: {message}", reason)
            if "Warn" in actions:
                warnings.append(f"Validation failed for ValidatingAdmissionPolicy "
                                f"'{policy_name}' with binding '{binding_name}': {message}")
            if "Audit" in actions:
                self.audit.append(AuditRecord(policy_name, binding_name, message,
                                              req.user.username))
        return warnings

    def _program(self, expression: str, functions: dict[str, Any]) -> Any:
        ast = self._compiled.get(expression)
        if ast is None:
            ast = self._compiled[expression] = self._env.compile(expression)
        return self._env.program(ast, functions=functions)

    def _evaluate(self, spec: Obj, req: Request) -> tuple[str, str] | None:
        """The first failed validation's (message, reason), or None."""
        functions = _authorizer_functions(self.authorizer, req.user)
        activation: dict[str, Any] = {
            "object": json_to_cel(req.new),
            "oldObject": json_to_cel(req.old),
            "request": json_to_cel(req.as_cel()),
            "namespaceObject": json_to_cel(req.namespace_object),
            "params": json_to_cel(None),
            "authorizer": celtypes.MapType({}),
            "variables": celtypes.MapType({}),
        }

        def evaluate(expression: str) -> Any:
            result = self._program(expression, functions).evaluate(activation)
            if isinstance(result, CELEvalError):
                raise result
            return result

        for condition in spec.get("matchConditions") or []:
            if not evaluate(condition["expression"]):
                return None
        variables: dict[Any, Any] = {}
        for variable in spec.get("variables") or []:
            activation["variables"] = celtypes.MapType(variables)
            variables[celtypes.StringType(variable["name"])] = evaluate(variable["expression"])
        activation["variables"] = celtypes.MapType(variables)
        for validation in spec.get("validations") or []:
            result = evaluate(validation["expression"])
            if not isinstance(result, celtypes.BoolType):
                raise CELEvalError(f"{validation['expression']!r} gave {result!r}, not a bool")
            if result:
                continue
            if "messageExpression" in validation:
                message = str(evaluate(validation["messageExpression"]))
            else:
                message = validation.get("message") or (
                    f"failed expression: {validation['expression']}")
            return message, validation.get("reason", "Invalid")
        return None
