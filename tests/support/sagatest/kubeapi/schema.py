"""A custom resource against its CRD's structural schema: pruning and validation.

Pruning drops fields the schema does not declare (unless `x-kubernetes-preserve-unknown-fields`),
as kube-apiserver does before storing; `apiVersion`, `kind` and `metadata` are kept. Validation
checks type, required, enum, minimum/maximum, minLength/maxLength, pattern, minItems/maxItems,
nullable and `x-kubernetes-int-or-string`, and reports every violation the way the server does
(`spec.onOrphan: Unsupported value: "x": supported values: "unwind", "reconcile"`), as one 422.
`x-kubernetes-validations` (CEL rules) are evaluated with cel-python, `self` the value and
`oldSelf` its previous value (a transition rule is skipped when there is none).
"""

from __future__ import annotations

import functools
import re
from typing import Any

import celpy
from celpy import celtypes
from celpy.adapter import json_to_cel
from celpy.evaluation import CELEvalError

Obj = dict[str, Any]
_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,), "array": (list,), "string": (str,), "boolean": (bool,),
    "integer": (int,), "number": (int, float),
}


def prune(schema: Obj, node: Any, root: bool = True) -> Any:
    """`node` with undeclared fields removed (in place for dicts and lists; returned)."""
    if isinstance(node, dict):
        if schema.get("x-kubernetes-preserve-unknown-fields") and not schema.get("properties"):
            return node
        properties: Obj = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for key in list(node):
            if root and key in ("apiVersion", "kind", "metadata"):
                continue
            if key in properties:
                prune(properties[key], node[key], root=False)
            elif isinstance(extra, dict):
                prune(extra, node[key], root=False)
            elif extra is True or schema.get("x-kubernetes-preserve-unknown-fields"):
                continue
            else:
                del node[key]
    elif isinstance(node, list) and isinstance(schema.get("items"), dict):
        for item in node:
            prune(schema["items"], item, root=False)
    return node


def _quote(value: Any) -> str:
    return f'"{value}"' if isinstance(value, str) else str(value)


def _type_ok(schema: Obj, value: Any) -> bool:
    if value is None:
        return bool(schema.get("nullable"))
    if schema.get("x-kubernetes-int-or-string"):
        return isinstance(value, (int, str)) and not isinstance(value, bool)
    wanted = schema.get("type")
    if not wanted:
        return True
    if wanted in ("integer", "number") and isinstance(value, bool):
        return False
    if wanted == "integer" and isinstance(value, float):
        return value.is_integer()
    return isinstance(value, _TYPES.get(wanted, (object,)))


def errors(schema: Obj, value: Any, path: str = "", root: bool = True) -> list[str]:
    """Every violation of `schema` by `value`, as `path: Reason: detail`."""
    out: list[str] = []
    where = path or "<root>"
    if not _type_ok(schema, value):
        got = "null" if value is None else type(value).__name__.replace(
            "dict", "object").replace("list", "array").replace("str", "string").replace(
            "int", "integer").replace("float", "number").replace("bool", "boolean")
        return [f'{where}: Invalid value: "{got}": {where} in body must be of type '
                f'{schema.get("type", "int-or-string")}: "{got}"']
    if value is None:
        return out
    if "enum" in schema and value not in schema["enum"]:
        supported = ", ".join(_quote(v) for v in schema["enum"])
        out.append(f"{where}: Unsupported value: {_quote(value)}: supported values: {supported}")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            out.append(f"{where}: Invalid value: {value}: {where} in body should be greater "
                       f"than or equal to {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            out.append(f"{where}: Invalid value: {value}: {where} in body should be less than "
                       f"or equal to {schema['maximum']}")
    if isinstance(value, str):
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            out.append(f"{where}: Too long: may not be more than {schema['maxLength']} bytes")
        if "minLength" in schema and len(value) < schema["minLength"]:
            out.append(f"{where}: Invalid value: {_quote(value)}: {where} in body should be at "
                       f"least {schema['minLength']} chars long")
        if "pattern" in schema and not re.search(schema["pattern"], value):
            out.append(f"{where}: Invalid value: {_quote(value)}: {where} in body should match "
                       f"'{schema['pattern']}'")
    if isinstance(value, list):
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            out.append(f"{where}: Too many: {len(value)}: must have at most "
                       f"{schema['maxItems']} items")
        if "minItems" in schema and len(value) < schema["minItems"]:
            out.append(f"{where}: Invalid value: {len(value)}: {where} in body should have at "
                       f"least {schema['minItems']} items")
        if isinstance(schema.get("items"), dict):
            for index, item in enumerate(value):
                out += errors(schema["items"], item, f"{path}[{index}]", root=False)
    if isinstance(value, dict):
        for required in schema.get("required") or []:
            if required not in value:
                prefix = f"{path}." if path else ""
                out.append(f"{prefix}{required}: Required value")
        properties: Obj = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            if root and key in ("apiVersion", "kind", "metadata"):
                continue
            child = f"{path}.{key}" if path else key
            if key in properties:
                out += errors(properties[key], item, child, root=False)
            elif isinstance(extra, dict):
                out += errors(extra, item, child, root=False)
    return out


@functools.cache
def _rule(expression: str) -> Any:
    env = celpy.Environment()
    return env.program(env.compile(expression))


def rule_errors(schema: Obj, value: Any, old: Any, path: str = "", root: bool = True) -> list[str]:
    """Violations of the `x-kubernetes-validations` rules below `schema` (old: None on create)."""
    out: list[str] = []
    where = path or "<root>"
    for rule in schema.get("x-kubernetes-validations") or []:
        expression = rule["rule"]
        if "oldSelf" in expression and old is None:
            continue
        try:
            result = _rule(expression).evaluate({"self": json_to_cel(value),
                                                 "oldSelf": json_to_cel(old)})
        except CELEvalError as exc:
            result = exc
        if result is not True and result != celtypes.BoolType(True):
            message = rule.get("message") or f"failed rule: {expression}"
            out.append(f"{where}: Invalid value: {_quote(value)}: {message}")
    if isinstance(value, dict):
        properties: Obj = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        olds = old if isinstance(old, dict) else {}
        for key, item in value.items():
            if root and key in ("apiVersion", "kind", "metadata"):
                continue
            child = f"{path}.{key}" if path else key
            sub = properties.get(key) or (extra if isinstance(extra, dict) else None)
            if sub is not None:
                out += rule_errors(sub, item, olds.get(key), child, root=False)
    return out
