"""Patch documents: JSON merge patch (RFC 7386), JSON patch (RFC 6902), a small strategic merge."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch

from .errors import ApiError

MERGE = "application/merge-patch+json"
JSON = "application/json-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
APPLY = "application/apply-patch+yaml"

# List fields of built-in kinds merged element-wise by a key, as the real strategic merge does.
STRATEGIC_MERGE_KEYS = {
    "conditions": "type",
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "env": "name",
    "volumeMounts": "mountPath",
    "ports": "containerPort",
    "imagePullSecrets": "name",
    "containerStatuses": "name",
    "initContainerStatuses": "name",
}


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, null deletes, everything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge_patch(target: Any, patch: Any, field: str = "") -> Any:
    """Merge patch plus keyed merging of the well-known lists of built-in kinds."""
    if isinstance(patch, list) and isinstance(target, list) and field in STRATEGIC_MERGE_KEYS:
        key = STRATEGIC_MERGE_KEYS[field]
        merged = copy.deepcopy(target)
        for item in patch:
            if not isinstance(item, dict) or key not in item:
                merged.append(copy.deepcopy(item))
                continue
            deleting = item.get("$patch") == "delete"
            index = next(
                (i for i, old in enumerate(merged)
                 if isinstance(old, dict) and old.get(key) == item[key]),
                None,
            )
            if deleting:
                if index is not None:
                    merged.pop(index)
            elif index is None:
                merged.append(copy.deepcopy(item))
            else:
                merged[index] = strategic_merge_patch(merged[index], item)
        return merged
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$"):
            continue
        if value is None:
            result.pop(key, None)
        else:
            result[key] = strategic_merge_patch(result.get(key), value, key)
    return result


def json_patch(target: dict[str, Any], ops: Any) -> dict[str, Any]:
    """RFC 6902; a failed `test` or a bad path is 422, as the apiserver answers."""
    if not isinstance(ops, list):
        raise ApiError(400, "json patch must be a list of operations", "BadRequest")
    try:
        result = jsonpatch.JsonPatch(ops).apply(copy.deepcopy(target))
    except jsonpatch.JsonPatchTestFailed as exc:
        raise ApiError(422, f"the server rejected our request due to an error in our request: "
                            f"testing value failed: {exc}", "Invalid") from exc
    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
        raise ApiError(422, f"the server rejected our request due to an error in our request: "
                            f"{exc}", "Invalid") from exc
    if not isinstance(result, dict):
        raise ApiError(422, "json patch replaced the object with a non-object", "Invalid")
    return result
