"""Server-side defaulting: CRD schema defaults, CRD status, a few built-in status fields."""

from __future__ import annotations

import copy
import datetime
from typing import Any

from . import errors
from .resources import CRD_GROUP, CRD_PLURAL, ResourceType

Obj = dict[str, Any]


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def is_crd(rt: ResourceType) -> bool:
    return rt.group == CRD_GROUP and rt.plural == CRD_PLURAL


def apply_defaults(schema: dict[str, Any] | None, node: Any) -> None:
    """Fill `default:` values of absent properties, recursively (structural schemas only)."""
    if not schema or not isinstance(node, dict):
        if schema and isinstance(node, list) and isinstance(schema.get("items"), dict):
            for item in node:
                apply_defaults(schema["items"], item)
        return
    for name, sub in (schema.get("properties") or {}).items():
        if name not in node and "default" in sub:
            node[name] = copy.deepcopy(sub["default"])
        if name in node:
            apply_defaults(sub, node[name])
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict):
        known = schema.get("properties") or {}
        for name, value in node.items():
            if name not in known:
                apply_defaults(extra, value)


def prepare(rt: ResourceType, obj: Obj) -> None:
    """Defaults applied on every write of `obj` (create or update)."""
    if rt.custom and rt.schema:
        apply_defaults(rt.schema, obj)
    if is_crd(rt):
        crd_status(rt, obj)
    elif rt.group == "" and rt.kind == "Namespace":
        obj.setdefault("spec", {"finalizers": ["kubernetes"]})
        obj.setdefault("status", {}).setdefault("phase", "Active")
    elif rt.group == "" and rt.kind == "Pod":
        obj.setdefault("status", {}).setdefault("phase", "Pending")


def prepare_update(rt: ResourceType, old: Obj, new: Obj) -> None:
    """Defaults on update; a CRD keeps its status unless its names changed."""
    prepare(rt, new)
    if is_crd(rt) and new["status"]["acceptedNames"] == (old.get("status") or {}).get(
            "acceptedNames"):
        new["status"] = copy.deepcopy(old.get("status"))


def crd_status(rt: ResourceType, obj: Obj) -> None:
    """Validate a CRD's names and mark it NamesAccepted and Established at once."""
    spec = obj.get("spec") or {}
    names = spec.get("names") or {}
    name = obj["metadata"]["name"]
    if not spec.get("group") or not names.get("plural") or not names.get("kind"):
        raise errors.invalid(rt, name, "spec: Required value: group, names.plural and "
                                       "names.kind are required")
    if name != f"{names['plural']}.{spec['group']}":
        raise errors.invalid(rt, name, f'metadata.name: Invalid value: "{name}": must be '
                                       "spec.names.plural+\".\"+spec.group")
    accepted = dict(names)
    accepted.setdefault("singular", names["kind"].lower())
    accepted.setdefault("listKind", names["kind"] + "List")
    stamp = now()
    obj["status"] = {
        "acceptedNames": accepted,
        "storedVersions": [v["name"] for v in spec.get("versions", []) if v.get("storage")],
        "conditions": [
            {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts",
             "message": "no conflicts found", "lastTransitionTime": stamp},
            {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
             "message": "the initial names have been accepted", "lastTransitionTime": stamp},
        ],
    }
