"""Objects, resourceVersions, generations, finalizers and the watch event history.

Everything here runs on the server's event loop thread; the thread-side API goes through it.
"""

from __future__ import annotations

import asyncio
import copy
import json
import secrets
import string
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import defaults, errors, patch, schema
from .admission import Admission, Request
from .auth import Attributes, Authorizer, UserInfo
from .defaults import now
from .errors import ApiError
from .resources import Registry, ResourceType
from .selectors import Predicate

Obj = dict[str, Any]
StoreKey = tuple[str, str]  # (group, plural)
ObjKey = tuple[str, str]  # (namespace or "", name)

DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
MAX_OBJECT_BYTES = 1572864  # etcd's default --max-request-bytes (1.5 MiB)


@dataclass
class RequestContext:
    """Who makes an HTTP request, and the warnings admission returns to them.

    Writes through the stand-in's Python API carry none: they are the ground truth a test sets
    up, as if written to etcd, and skip admission (never schema validation or the size limit).
    """

    user: UserInfo
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class WatchEvent:
    rv: int
    type: str  # ADDED | MODIFIED | DELETED
    key: StoreKey
    obj: Obj


@dataclass(eq=False)
class Watcher:
    key: StoreKey
    queue: asyncio.Queue[WatchEvent | None] = field(default_factory=asyncio.Queue)


def _spec_part(obj: Obj, rt: ResourceType) -> Obj:
    """What counts for metadata.generation: all but metadata (and status, if a subresource)."""
    skip = {"metadata", "status"} if rt.has_status else {"metadata"}
    return {k: v for k, v in obj.items() if k not in skip}


def _comparable(obj: Obj) -> Obj:
    out = copy.deepcopy(obj)
    out.get("metadata", {}).pop("resourceVersion", None)
    return out


class Store:
    def __init__(self, registry: Registry, history_limit: int = 5000) -> None:
        self.registry = registry
        self.objects: dict[StoreKey, dict[ObjKey, Obj]] = {}
        self.rv = 1000
        self.history: deque[WatchEvent] = deque()
        self.history_limit = history_limit
        self.compacted_rv = self.rv  # a watch may resume from any RV >= this
        self.watchers: set[Watcher] = set()
        self.listeners: list[Callable[[], None]] = []
        self.evictions_blocked = False
        self.graceful_pod_deletion = False
        self.authorizer = Authorizer(self.objects)
        self.admission = Admission(self.objects, self.authorizer)
        ns_type = self.registry.find("", "v1", "namespaces")
        assert ns_type is not None
        for name in DEFAULT_NAMESPACES:
            self.create(ns_type, None, {"metadata": {"name": name}})

    # ---- events ----------------------------------------------------------------------------

    def _next_rv(self) -> int:
        self.rv += 1
        return self.rv

    def _emit(self, rt: ResourceType, type_: str, obj: Obj) -> None:
        event = WatchEvent(int(obj["metadata"]["resourceVersion"]), type_, rt.key,
                           copy.deepcopy(obj))
        self.history.append(event)
        while len(self.history) > self.history_limit:
            self.compacted_rv = self.history.popleft().rv
        for watcher in list(self.watchers):
            if watcher.key == rt.key:
                watcher.queue.put_nowait(event)
        for listener in list(self.listeners):
            listener()

    def compact(self) -> None:
        """Forget the event history: watches resuming from any RV seen so far get 410 Gone.

        The RV moves on by one, as if writes elsewhere in the cluster had been compacted too.
        """
        self.history.clear()
        self.compacted_rv = self._next_rv()

    def events_since(self, key: StoreKey, rv: int) -> list[WatchEvent] | None:
        """Events of `key` newer than `rv`, or None when `rv` is too old (410)."""
        if rv < self.compacted_rv:
            return None
        return [e for e in self.history if e.key == key and e.rv > rv]

    # ---- reads -----------------------------------------------------------------------------

    def _bucket(self, rt: ResourceType) -> dict[ObjKey, Obj]:
        return self.objects.setdefault(rt.key, {})

    @staticmethod
    def _okey(rt: ResourceType, ns: str | None, name: str) -> ObjKey:
        return (ns or "" if rt.namespaced else "", name)

    @staticmethod
    def present(rt: ResourceType, obj: Obj) -> Obj:
        out = copy.deepcopy(obj)
        out["apiVersion"] = rt.api_version
        out["kind"] = rt.kind
        return out

    def _current(self, rt: ResourceType, ns: str | None, name: str) -> Obj:
        obj = self._bucket(rt).get(self._okey(rt, ns, name))
        if obj is None:
            raise errors.not_found(rt, name)
        return obj

    def get(self, rt: ResourceType, ns: str | None, name: str) -> Obj:
        return self.present(rt, self._current(rt, ns, name))

    def list(
        self, rt: ResourceType, ns: str | None, predicate: Predicate | None = None
    ) -> list[Obj]:
        out = []
        for (obj_ns, _), obj in sorted(self._bucket(rt).items()):
            if rt.namespaced and ns and obj_ns != ns:
                continue
            if predicate is None or predicate(obj):
                out.append(self.present(rt, obj))
        return out

    # ---- writes ----------------------------------------------------------------------------

    def create(self, rt: ResourceType, ns: str | None, body: Any, dry_run: bool = False,
               ctx: RequestContext | None = None) -> Obj:
        if not isinstance(body, dict):
            raise ApiError(400, "the body of the request was not an object", "BadRequest")
        obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {})
        if not meta.get("name"):
            if not meta.get("generateName"):
                raise errors.invalid(rt, "", "metadata.name: Required value: name or "
                                             "generateName is required")
            suffix = "".join(secrets.choice(string.ascii_lowercase + string.digits)
                             for _ in range(5))
            meta["name"] = meta["generateName"] + suffix
        name = meta["name"]
        if rt.namespaced:
            if meta.get("namespace") and ns and meta["namespace"] != ns:
                raise ApiError(400, "the namespace of the provided object does not match the "
                                    "namespace sent on the request", "BadRequest")
            ns = ns or meta.get("namespace") or "default"
            ns_type = self.registry.find("", "v1", "namespaces")
            assert ns_type is not None
            if (("", ns) not in self._bucket(ns_type)):
                raise ApiError(404, f'namespaces "{ns}" not found', "NotFound",
                               {"name": ns, "kind": "namespaces"})
            meta["namespace"] = ns
        else:
            meta.pop("namespace", None)
        if self._okey(rt, ns, name) in self._bucket(rt):
            raise errors.already_exists(rt, name)
        for key in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds"):
            meta.pop(key, None)
        meta["uid"] = str(uuid.uuid4())
        meta["generation"] = 1
        meta["creationTimestamp"] = now()
        if rt.custom and rt.has_status:
            obj.pop("status", None)
        self._prune(rt, obj)
        defaults.prepare(rt, obj)
        obj["apiVersion"], obj["kind"] = rt.api_version, rt.kind
        self._check(rt, obj, name)
        self._admit(rt, "CREATE", None, ns, name, None, obj, ctx, dry_run)
        if dry_run:
            meta["resourceVersion"] = str(self.rv)
            return self.present(rt, obj)
        meta["resourceVersion"] = str(self._next_rv())
        self._bucket(rt)[self._okey(rt, ns, name)] = obj
        if defaults.is_crd(rt):
            self.registry.register_crd(obj)
        self._emit(rt, "ADDED", obj)
        return self.present(rt, obj)


    def update(self, rt: ResourceType, ns: str | None, name: str, body: Any,
               subresource: str | None = None, dry_run: bool = False,
               ctx: RequestContext | None = None) -> Obj:
        if not isinstance(body, dict):
            raise ApiError(400, "the body of the request was not an object", "BadRequest")
        old = self._current(rt, ns, name)
        given_rv = (body.get("metadata") or {}).get("resourceVersion")
        if given_rv and given_rv != old["metadata"]["resourceVersion"]:
            raise errors.conflict(rt, name)
        return self._write(rt, old, copy.deepcopy(body), subresource, dry_run, ctx)

    def patch(self, rt: ResourceType, ns: str | None, name: str, content_type: str,
              document: Any, subresource: str | None = None, dry_run: bool = False,
              ctx: RequestContext | None = None) -> Obj:
        old = self._current(rt, ns, name)
        if content_type == patch.MERGE:
            new = patch.merge_patch(old, document)
        elif content_type == patch.JSON:
            new = patch.json_patch(old, document)
        elif content_type == patch.STRATEGIC and not rt.custom:
            new = patch.strategic_merge_patch(old, document)
        else:
            raise ApiError(415, f"the body of the request was in an unknown format - accepted "
                                f"media types include: application/json-patch+json, "
                                f"application/merge-patch+json"
                                f"{'' if rt.custom else ', ' + patch.STRATEGIC}",
                           "UnsupportedMediaType")
        if not isinstance(new, dict):
            raise ApiError(422, "patch result is not an object", "Invalid")
        patched_rv = (new.get("metadata") or {}).get("resourceVersion")
        if patched_rv and patched_rv != old["metadata"]["resourceVersion"]:
            raise errors.conflict(rt, name)
        return self._write(rt, old, new, subresource, dry_run, ctx)

    def apply(self, rt: ResourceType, ns: str | None, name: str, config: Any,
              subresource: str | None = None, dry_run: bool = False,
              ctx: RequestContext | None = None) -> tuple[Obj, bool]:
        """Server-side apply, simplified: create if absent, else merge the applied config.

        Field ownership is not tracked: fields dropped from the config are kept, and there
        are no conflicts between field managers.
        """
        if not isinstance(config, dict):
            raise ApiError(400, "the applied configuration is not an object", "BadRequest")
        config_name = (config.get("metadata") or {}).get("name")
        if config_name != name:
            raise ApiError(400, f"the name of the object ({config_name}) does not match the "
                                f"name on the URL ({name})", "BadRequest")
        if self._okey(rt, ns, name) not in self._bucket(rt):
            if subresource is not None:
                raise errors.not_found(rt, name)
            return self.create(rt, ns, config, dry_run, ctx), True
        old = self._current(rt, ns, name)
        merged = patch.merge_patch(old, config)
        return self._write(rt, old, merged, subresource, dry_run, ctx), False

    def _prune(self, rt: ResourceType, obj: Obj) -> None:
        if rt.custom and rt.schema:
            schema.prune(rt.schema, obj)

    def _check(self, rt: ResourceType, obj: Obj, name: str, old: Obj | None = None) -> None:
        """Schema validation of custom resources, and etcd's object size limit."""
        if rt.custom and rt.schema:
            problems = schema.errors(rt.schema, obj) or schema.rule_errors(rt.schema, obj, old)
            if problems:
                shown = problems[0] if len(problems) == 1 else "[" + ", ".join(problems) + "]"
                causes = [{"reason": "FieldValueInvalid", "field": field, "message": message}
                          for field, _, message in (p.partition(": ") for p in problems)]
                raise ApiError(422, f'{rt.kind}.{rt.group} "{name}" is invalid: {shown}',
                               "Invalid", {"name": name, "group": rt.group, "kind": rt.kind,
                                           "causes": causes})
        if len(json.dumps(obj, separators=(",", ":"))) > MAX_OBJECT_BYTES:
            raise ApiError(413, "etcdserver: request is too large", "RequestEntityTooLarge",
                           {"name": name, "group": rt.group, "kind": rt.plural})

    def _admit(self, rt: ResourceType, operation: str, subresource: str | None,
               ns: str | None, name: str, old: Obj | None, new: Obj | None,
               ctx: RequestContext | None, dry_run: bool) -> None:
        if ctx is None:
            return
        self._owner_references(rt, operation, ns, name, old, new, ctx.user)
        namespace_object = None
        if rt.namespaced and ns:
            namespace_object = self.objects.get(("", "namespaces"), {}).get(("", ns))
        ctx.warnings += self.admission.validate(Request(
            operation, rt.group, rt.version, rt.plural, subresource or "", rt.kind,
            ns or "" if rt.namespaced else "", name, ctx.user, dry_run,
            copy.deepcopy(old), copy.deepcopy(new), namespace_object))

    def _owner_references(self, rt: ResourceType, operation: str, ns: str | None, name: str,
                          old: Obj | None, new: Obj | None, who: UserInfo) -> None:
        """The OwnerReferencesPermissionEnforcement admission plugin: changing an object's
        ownerReferences needs `delete` on it (not when creating it), and a new reference with
        blockOwnerDeletion needs `update` on the owner's `finalizers` subresource."""
        if new is None or operation not in ("CREATE", "UPDATE"):
            return
        refs = list((new.get("metadata") or {}).get("ownerReferences") or [])
        before = list(((old or {}).get("metadata") or {}).get("ownerReferences") or [])
        if refs == before:
            return
        described = f'{rt.plural}{"." + rt.group if rt.group else ""} "{name}"'
        if operation == "UPDATE" and not self.authorizer.allowed(who, Attributes(
                "delete", rt.group, rt.plural, "", ns or "", name)):
            raise ApiError(403, f"{described} is forbidden: cannot set an ownerRef on a "
                                "resource you can't delete", "Forbidden")
        blocking_before = {ref.get("uid") for ref in before if ref.get("blockOwnerDeletion")}
        for ref in refs:
            if not ref.get("blockOwnerDeletion") or ref.get("uid") in blocking_before:
                continue
            owner = self.registry.by_kind(str(ref.get("apiVersion", "")),
                                          str(ref.get("kind", "")))
            allowed = owner is not None and self.authorizer.allowed(who, Attributes(
                "update", owner.group, owner.plural, "finalizers",
                ns or "" if owner.namespaced else "", str(ref.get("name", ""))))
            if not allowed:
                raise ApiError(403, f"{described} is forbidden: cannot set blockOwnerDeletion "
                                    "if an ownerReference refers to a resource you can't set "
                                    "finalizers on", "Forbidden")

    def _write(self, rt: ResourceType, old: Obj, new: Obj, subresource: str | None,
               dry_run: bool, ctx: RequestContext | None = None) -> Obj:
        """The common path of PUT and PATCH: status split, immutables, generation, no-ops."""
        name = old["metadata"]["name"]
        if subresource == "status":
            candidate = copy.deepcopy(old)
            if "status" in new:
                candidate["status"] = new["status"]
            else:
                candidate.pop("status", None)
            new = candidate
        elif subresource is not None:
            raise ApiError(405, f"{subresource} does not support this method", "MethodNotAllowed")
        elif rt.has_status:
            if "status" in old:
                new["status"] = copy.deepcopy(old["status"])
            else:
                new.pop("status", None)
        meta = new.setdefault("metadata", {})
        old_meta = old["metadata"]
        for key in ("name", "namespace", "uid", "creationTimestamp", "deletionTimestamp",
                    "deletionGracePeriodSeconds", "generation", "resourceVersion"):
            if key in old_meta:
                meta[key] = old_meta[key]
            else:
                meta.pop(key, None)
        if old_meta.get("deletionTimestamp"):
            added = set(meta.get("finalizers") or []) - set(old_meta.get("finalizers") or [])
            if added:
                raise ApiError(422, f'{rt.describe()} "{name}" is forbidden: no new finalizers '
                                    "can be added if the object is being deleted", "Forbidden")
        if not meta.get("finalizers"):
            meta.pop("finalizers", None)
        new["apiVersion"], new["kind"] = old["apiVersion"], old["kind"]
        self._prune(rt, new)
        defaults.prepare_update(rt, old, new)
        self._check(rt, new, name, old)
        self._admit(rt, "UPDATE", subresource, meta.get("namespace"), name, old, new, ctx,
                    dry_run)
        if _spec_part(new, rt) != _spec_part(old, rt):
            meta["generation"] = int(old_meta.get("generation", 1)) + 1
        if _comparable(new) == _comparable(old):
            return self.present(rt, old)
        if dry_run:
            return self.present(rt, new)
        meta["resourceVersion"] = str(self._next_rv())
        okey = self._okey(rt, meta.get("namespace"), name)
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            self._remove(rt, okey, new)
        else:
            self._bucket(rt)[okey] = new
            if defaults.is_crd(rt):
                self.registry.register_crd(new)
            self._emit(rt, "MODIFIED", new)
        return self.present(rt, new)

    def _remove(self, rt: ResourceType, key: ObjKey, final: Obj) -> None:
        self._bucket(rt).pop(key, None)
        self._emit(rt, "DELETED", final)
        if defaults.is_crd(rt):
            spec = final["spec"]
            served = self.registry.find(spec["group"], spec["versions"][0]["name"],
                                        spec["names"]["plural"])
            self.registry.unregister_crd(final["metadata"]["name"])
            if served is not None:
                for okey, obj in list(self._bucket(served).items()):
                    self._force_remove(served, okey, obj)
        elif rt.group == "" and rt.kind == "Namespace":
            for types in self.registry.all():
                if types.namespaced:
                    for okey, obj in list(self._bucket(types).items()):
                        if okey[0] == key[1]:
                            self._force_remove(types, okey, obj)

    def _force_remove(self, rt: ResourceType, key: ObjKey, obj: Obj) -> None:
        final = copy.deepcopy(obj)
        final["metadata"]["resourceVersion"] = str(self._next_rv())
        self._bucket(rt).pop(key, None)
        self._emit(rt, "DELETED", final)

    def delete(self, rt: ResourceType, ns: str | None, name: str,
               options: dict[str, Any] | None = None, dry_run: bool = False,
               ctx: RequestContext | None = None) -> Obj:
        options = options or {}
        old = self._current(rt, ns, name)
        self._admit(rt, "DELETE", None, ns, name, old, None, ctx, dry_run)
        pre = options.get("preconditions") or {}
        if pre.get("resourceVersion") and pre["resourceVersion"] != old["metadata"][
                "resourceVersion"]:
            raise errors.conflict(rt, name)
        if pre.get("uid") and pre["uid"] != old["metadata"]["uid"]:
            raise errors.conflict(rt, name)
        if dry_run:
            return self.present(rt, old)
        key = self._okey(rt, ns, name)
        graceful = (self.graceful_pod_deletion and rt.group == "" and rt.kind == "Pod"
                    and options.get("gracePeriodSeconds") != 0)
        if old["metadata"].get("finalizers") or graceful:
            if old["metadata"].get("deletionTimestamp"):
                if graceful and options.get("gracePeriodSeconds") == 0:
                    return self.remove_now(rt, ns, name)
                return self.present(rt, old)
            new = copy.deepcopy(old)
            new["metadata"]["deletionTimestamp"] = now()
            new["metadata"]["deletionGracePeriodSeconds"] = int(
                options.get("gracePeriodSeconds", 30 if graceful else 0))
            new["metadata"]["resourceVersion"] = str(self._next_rv())
            self._bucket(rt)[key] = new
            self._emit(rt, "MODIFIED", new)
            return self.present(rt, new)
        final = copy.deepcopy(old)
        final["metadata"]["resourceVersion"] = str(self._next_rv())
        self._remove(rt, key, final)
        return self.present(rt, final)

    def remove_now(self, rt: ResourceType, ns: str | None, name: str) -> Obj:
        """Remove an object at once, ignoring finalizers (a kubelet finishing a pod, a test)."""
        old = self._current(rt, ns, name)
        final = copy.deepcopy(old)
        final["metadata"]["resourceVersion"] = str(self._next_rv())
        self._remove(rt, self._okey(rt, ns, name), final)
        return self.present(rt, final)

    def evict(self, rt: ResourceType, ns: str | None, name: str, body: Any) -> Obj:
        """policy/v1 Eviction: DisruptionTarget condition, then a delete (R: §3.1)."""
        pod = self._current(rt, ns, name)
        if self.evictions_blocked:
            raise ApiError(429, "Cannot evict pod as it would violate the pod's disruption "
                                "budget.", "TooManyRequests",
                           {"causes": [{"reason": "DisruptionBudget",
                                        "message": "The disruption budget needs 1 healthy pods"}]})
        options = (body or {}).get("deleteOptions") if isinstance(body, dict) else None
        if not pod["metadata"].get("deletionTimestamp"):
            status = copy.deepcopy(pod.get("status") or {})
            conditions = [c for c in status.get("conditions") or []
                          if c.get("type") != "DisruptionTarget"]
            conditions.append({"type": "DisruptionTarget", "status": "True",
                               "reason": "EvictionByEvictionAPI",
                               "message": "Eviction API: evicting", "lastTransitionTime": now()})
            status["conditions"] = conditions
            self._write(rt, pod, {**copy.deepcopy(pod), "status": status}, "status", False)
        self.delete(rt, ns, name, options)
        return errors.status_body(201, "", "")
