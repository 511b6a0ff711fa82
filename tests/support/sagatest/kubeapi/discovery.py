"""Legacy discovery documents, /version and the OpenAPI v3 index kubectl validates with."""

from __future__ import annotations

import hashlib
from typing import Any

from .resources import ALL_VERBS, Registry, ResourceType

VERSION = {
    "major": "1", "minor": "37", "gitVersion": "v1.37.0", "gitCommit": "stand-in",
    "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.25",
    "compiler": "gc", "platform": "linux/amd64",
}


def api_versions(address: str) -> dict[str, Any]:
    return {"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": address}]}


def _group(name: str, versions: list[str]) -> dict[str, Any]:
    entries = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"kind": "APIGroup", "apiVersion": "v1", "name": name, "versions": entries,
            "preferredVersion": entries[0]}


def api_group_list(registry: Registry) -> dict[str, Any]:
    groups = [_group(name, versions)
              for name, versions in sorted(registry.group_versions().items()) if name]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def api_group(registry: Registry, name: str) -> dict[str, Any] | None:
    versions = registry.group_versions().get(name)
    return _group(name, versions) if versions else None


def _resource(rt: ResourceType) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": rt.plural, "singularName": rt.singular, "namespaced": rt.namespaced,
        "kind": rt.kind, "verbs": ALL_VERBS,
        "storageVersionHash": hashlib.sha256(rt.describe().encode()).hexdigest()[:12],
    }
    if rt.short_names:
        entry["shortNames"] = list(rt.short_names)
    if rt.categories:
        entry["categories"] = list(rt.categories)
    return entry


def _subresources(rt: ResourceType) -> list[dict[str, Any]]:
    out = []
    if rt.has_status:
        out.append({"name": f"{rt.plural}/status", "singularName": "", "namespaced": rt.namespaced,
                    "kind": rt.kind, "verbs": ["get", "patch", "update"]})
    if "eviction" in rt.subresources:
        out.append({"name": f"{rt.plural}/eviction", "singularName": "",
                    "namespaced": rt.namespaced, "group": "policy", "version": "v1",
                    "kind": "Eviction", "verbs": ["create"]})
    return out


def resource_list(registry: Registry, group: str, version: str) -> dict[str, Any] | None:
    types = sorted(registry.in_group_version(group, version), key=lambda rt: rt.plural)
    if not types:
        return None
    resources: list[dict[str, Any]] = []
    for rt in types:
        resources.append(_resource(rt))
        resources.extend(_subresources(rt))
    return {"kind": "APIResourceList", "apiVersion": "v1",
            "groupVersion": f"{group}/{version}" if group else version, "resources": resources}


def _gv_path(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


def _hash(registry: Registry, group: str, version: str) -> str:
    names = ",".join(sorted(rt.plural for rt in registry.in_group_version(group, version)))
    return hashlib.sha256(f"{group}/{version}:{names}".encode()).hexdigest()[:16].upper()


def openapi_index(registry: Registry) -> dict[str, Any]:
    paths = {}
    for group, versions in registry.group_versions().items():
        for version in versions:
            path = _gv_path(group, version)
            paths[path] = {"serverRelativeURL":
                           f"/openapi/v3/{path}?hash={_hash(registry, group, version)}"}
    return {"paths": paths}


def openapi_group_version(registry: Registry, group: str, version: str) -> dict[str, Any] | None:
    """A document declaring the `fieldValidation` parameter, so kubectl validates server-side."""
    types = registry.in_group_version(group, version)
    if not types:
        return None
    param = [{"name": "fieldValidation", "in": "query", "schema": {"type": "string"},
              "description": "How the server handles unknown or duplicate fields."}]
    paths: dict[str, Any] = {}
    for rt in types:
        gvk = {"group": rt.group, "version": rt.version, "kind": rt.kind}
        prefix = "/" + _gv_path(group, version)
        scope = "/namespaces/{namespace}" if rt.namespaced else ""
        ok = {"200": {"description": "OK"}}
        paths[f"{prefix}{scope}/{rt.plural}"] = {
            "post": {"x-kubernetes-group-version-kind": gvk, "x-kubernetes-action": "post",
                     "parameters": param, "responses": ok}}
        paths[f"{prefix}{scope}/{rt.plural}/{{name}}"] = {
            verb: {"x-kubernetes-group-version-kind": gvk, "x-kubernetes-action": action,
                   "parameters": param, "responses": ok}
            for verb, action in (("put", "put"), ("patch", "patch"))}
    return {"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": "v1.37.0"},
            "paths": paths, "components": {"schemas": {}}}
