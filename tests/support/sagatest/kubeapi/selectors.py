"""Label selectors, field selectors and the JSONPath subset used by printer columns."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from .errors import ApiError

Predicate = Callable[[dict[str, Any]], bool]

_SET_RE = re.compile(r"^\s*(!?)([^\s!=()]+)\s*(?:(notin|in)\s*\(([^)]*)\))?\s*$")
_EQ_RE = re.compile(r"^\s*([^\s!=]+)\s*(==|=|!=)\s*(\S*)\s*$")


def _split_requirements(selector: str) -> list[str]:
    """Split on commas that are not inside parentheses."""
    parts: list[str] = []
    depth = 0
    current = ""
    for ch in selector:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    parts.append(current)
    return [p for p in parts if p.strip()]


def _label_check(op: str, key: str, values: frozenset[str], labels: dict[str, str]) -> bool:
    if op == "=":
        return labels.get(key) in values
    if op == "!=":
        return labels.get(key) not in values
    if op == "exists":
        return key in labels
    return key not in labels  # "!exists"


def label_selector(selector: str | None) -> Predicate:
    """`a=b`, `a==b`, `a!=b`, `a in (x,y)`, `a notin (x)`, `a`, `!a`, comma-joined."""
    if not selector:
        return lambda obj: True
    checks: list[tuple[str, str, frozenset[str]]] = []
    for requirement in _split_requirements(selector):
        eq = _EQ_RE.match(requirement)
        if eq:
            key, op, value = eq.groups()
            checks.append(("!=" if op == "!=" else "=", key, frozenset([value])))
            continue
        match = _SET_RE.match(requirement)
        if not match:
            raise ApiError(400, f"unable to parse requirement: {requirement!r}", "BadRequest")
        negated, key, op, values = match.groups()
        if op:
            allowed = frozenset(v.strip() for v in values.split(",") if v.strip())
            checks.append(("=" if op == "in" else "!=", key, allowed))
        else:
            checks.append(("!exists" if negated else "exists", key, frozenset()))

    def predicate(obj: dict[str, Any]) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return all(_label_check(op, key, values, labels) for op, key, values in checks)

    return predicate


def _field_value(obj: dict[str, Any], path: str) -> str:
    node: Any = obj
    for part in path.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    if node is None:
        return ""
    if isinstance(node, bool):
        return "true" if node else "false"
    return str(node)


def field_selector(selector: str | None) -> Predicate:
    """`metadata.name=x`, `metadata.namespace!=y`, `status.phase=Running`, any dotted path."""
    if not selector:
        return lambda obj: True
    checks: list[tuple[str, bool, str]] = []
    for requirement in _split_requirements(selector):
        eq = _EQ_RE.match(requirement)
        if not eq:
            raise ApiError(400, f"invalid field selector: {requirement!r}", "BadRequest")
        path, op, value = eq.groups()
        checks.append((path, op != "!=", value))

    def predicate(obj: dict[str, Any]) -> bool:
        return all((_field_value(obj, p) == v) == positive for p, positive, v in checks)

    return predicate


_FILTER_RE = re.compile(r"^\[\?\(@\.([\w.]+)\s*==\s*[\"']([^\"']*)[\"']\)\]")
_INDEX_RE = re.compile(r"^\[(\d+)\]")
_NAME_RE = re.compile(r"^\.?([\w-]+)")


def json_path(obj: Any, path: str) -> Any:
    """Evaluate `.a.b`, `.a[0].b` and `.a[?(@.type=="X")].b`; None when absent."""
    rest = path.strip()
    if rest.startswith("{") and rest.endswith("}"):
        rest = rest[1:-1]
    node: Any = obj
    while rest and node is not None:
        filt = _FILTER_RE.match(rest)
        index = _INDEX_RE.match(rest)
        if filt:
            field, wanted = filt.groups()
            items = node if isinstance(node, list) else []
            node = next((i for i in items if _field_value(i, field) == wanted), None)
            rest = rest[filt.end():]
        elif index:
            position = int(index.group(1))
            node = node[position] if isinstance(node, list) and position < len(node) else None
            rest = rest[index.end():]
        else:
            name = _NAME_RE.match(rest)
            if not name:
                raise ValueError(f"unsupported JSONPath: {path}")
            node = node.get(name.group(1)) if isinstance(node, dict) else None
            rest = rest[name.end():]
    return node


def label_selector_object(selector: dict[str, Any]) -> Predicate:
    """A metav1.LabelSelector (`matchLabels`, `matchExpressions`) as a predicate on objects."""
    match_labels: dict[str, str] = selector.get("matchLabels") or {}
    expressions: list[dict[str, Any]] = selector.get("matchExpressions") or []

    def matches(obj: dict[str, Any]) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        if any(labels.get(k) != v for k, v in match_labels.items()):
            return False
        for expr in expressions:
            key, op, values = expr["key"], expr["operator"], set(expr.get("values") or [])
            if op == "In" and labels.get(key) not in values:
                return False
            if op == "NotIn" and key in labels and labels[key] in values:
                return False
            if op == "Exists" and key not in labels:
                return False
            if op == "DoesNotExist" and key in labels:
                return False
        return True

    return matches
