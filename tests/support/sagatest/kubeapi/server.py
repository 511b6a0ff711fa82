"""The aiohttp application: routing of Kubernetes API paths onto the store."""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass
from typing import Any

import yaml
from aiohttp import web

from . import discovery, patch, protobuf, table
from .auth import Attributes, Authenticator, UserInfo
from .errors import ApiError, status_body
from .resources import Registry, ResourceType
from .selectors import field_selector, label_selector
from .store import RequestContext, Store
from .watch import serve_watch

log = logging.getLogger(__name__)
AUTHZ = "authorization.k8s.io"
AUTHN = "authentication.k8s.io"
MAX_BODY_BYTES = 3 * 1024 * 1024  # kube-apiserver's limit on a request body
CONTEXT = web.RequestKey("context", RequestContext)


def _ctx(request: web.Request) -> RequestContext:
    ctx: RequestContext = request[CONTEXT]
    return ctx


@dataclass(frozen=True)
class RequestRecord:
    """One request as the stand-in saw it (for tests asserting on what a client sent)."""

    method: str
    path: str
    query: str
    content_type: str
    accept: str
    user_agent: str
    authorization: str
    user: str = ""
    status: int = 0
    """The HTTP status answered (0 while the request is being served)."""


def _json(body: Any, status: int = 200) -> web.Response:
    return web.Response(text=json.dumps(body), status=status, content_type="application/json")


def _not_found() -> ApiError:
    return ApiError(404, "the server could not find the requested resource", "NotFound", {})


class ApiServer:
    def __init__(self, registry: Registry, store: Store, bookmark_interval: float = 2.0) -> None:
        self.registry = registry
        self.store = store
        self.bookmark_interval = bookmark_interval
        self.address = "127.0.0.1"
        self.requests: list[RequestRecord] = []
        self.authenticator = Authenticator()
        self.app = web.Application(middlewares=[self._middleware], client_max_size=64 * 2**20)
        self.app.router.add_route("*", "/{tail:.*}", self._dispatch)

    def identify(self, request: web.Request) -> UserInfo:
        return self.authenticator.identify(
            request.headers, request.headers.getall("Impersonate-Group", []),
            self.store.authorizer)

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        record = RequestRecord(
            request.method, request.path, request.query_string,
            request.headers.get("Content-Type", ""), request.headers.get("Accept", ""),
            request.headers.get("User-Agent", ""), request.headers.get("Authorization", ""))
        index = len(self.requests)
        self.requests.append(record)
        response: web.StreamResponse
        try:
            who = self.identify(request)
            record = self.requests[index] = dataclasses.replace(record, user=who.username)
            ctx = RequestContext(who)
            request[CONTEXT] = ctx
            response = await handler(request)
            for warning in ctx.warnings:
                response.headers.add("Warning", f'299 - "{warning}"')
        except ApiError as exc:
            response = _json(exc.body, exc.code)
        except Exception as exc:  # a stand-in bug: make it loud in the client's error
            log.exception("stand-in failure on %s %s", request.method, request.path)
            response = _json(status_body(500, f"stand-in error: {exc!r}", "InternalError"), 500)
        self.requests[index] = dataclasses.replace(record, status=response.status)
        return response

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        parts = [p for p in request.path.split("/") if p]
        registry = self.registry
        resource_request = (len(parts) >= 3 and parts[0] == "api") or (
            len(parts) >= 4 and parts[0] == "apis")
        if not resource_request:
            verb = {"GET": "get", "HEAD": "head", "POST": "post", "PUT": "put",
                    "PATCH": "patch", "DELETE": "delete"}.get(request.method, "get")
            self.store.authorizer.require(_ctx(request).user,
                                          Attributes(verb, path=request.path))
        if request.method == "GET":
            if parts in (["healthz"], ["readyz"], ["livez"]):
                return web.Response(text="ok")
            if parts == ["version"]:
                return _json(discovery.VERSION)
            if parts == ["api"]:
                return _json(discovery.api_versions(f"{self.address}"))
            if parts == ["apis"]:
                return _json(discovery.api_group_list(registry))
            if parts[:2] == ["openapi", "v3"]:
                return self._openapi(parts[2:])
            if len(parts) == 2 and parts[0] == "api":
                found = discovery.resource_list(registry, "", parts[1])
                return _json(found) if found else _json(_not_found().body, 404)
            if len(parts) == 2 and parts[0] == "apis":
                group = discovery.api_group(registry, parts[1])
                return _json(group) if group else _json(_not_found().body, 404)
            if len(parts) == 3 and parts[0] == "apis":
                found = discovery.resource_list(registry, parts[1], parts[2])
                return _json(found) if found else _json(_not_found().body, 404)
        if request.method == "POST" and parts[:3] == ["apis", AUTHZ, "v1"] and len(parts) == 4:
            return await self._access_review(request, parts[3])
        if request.method == "POST" and parts == ["apis", AUTHN, "v1", "selfsubjectreviews"]:
            return _json({"apiVersion": f"{AUTHN}/v1", "kind": "SelfSubjectReview",
                          "metadata": {}, "status": {"userInfo": _ctx(request).user.as_dict()}},
                         201)  # `kubectl auth whoami`
        if len(parts) >= 3 and parts[0] == "api":
            return await self._resource(request, "", parts[1], parts[2:])
        if len(parts) >= 4 and parts[0] == "apis":
            return await self._resource(request, parts[1], parts[2], parts[3:])
        raise _not_found()

    async def _access_review(self, request: web.Request, kind: str) -> web.Response:
        """SelfSubjectAccessReview (`kubectl auth can-i`) and SubjectAccessReview."""
        body = await self._body(request) or {}
        spec = body.get("spec") or {}
        if kind == "selfsubjectaccessreviews":
            who = _ctx(request).user
        elif kind == "subjectaccessreviews":
            self.store.authorizer.require(_ctx(request).user, Attributes(
                "create", AUTHZ, kind))
            who = UserInfo(spec.get("user", ""), tuple(spec.get("groups") or []),
                           spec.get("uid", ""))
        else:
            raise _not_found()
        resource = spec.get("resourceAttributes")
        if resource is not None:
            attrs = Attributes(resource.get("verb", ""), resource.get("group", ""),
                               resource.get("resource", ""), resource.get("subresource", ""),
                               resource.get("namespace", ""), resource.get("name", ""))
        else:
            other = spec.get("nonResourceAttributes") or {}
            attrs = Attributes(other.get("verb", ""), path=other.get("path", ""))
        allowed = self.store.authorizer.allowed(who, attrs)
        return _json({**body, "status": {"allowed": allowed}}, 201)

    def _openapi(self, rest: list[str]) -> web.Response:
        if not rest:
            return _json(discovery.openapi_index(self.registry))
        if rest[0] == "api" and len(rest) == 2:
            doc = discovery.openapi_group_version(self.registry, "", rest[1])
        elif rest[0] == "apis" and len(rest) == 3:
            doc = discovery.openapi_group_version(self.registry, rest[1], rest[2])
        else:
            doc = None
        if doc is None:
            raise _not_found()
        return _json(doc)

    async def _resource(self, request: web.Request, group: str, version: str,
                        rest: list[str]) -> web.StreamResponse:
        ns: str | None = None
        if rest[0] == "namespaces" and len(rest) >= 3 and rest[2] not in ("status", "finalize"):
            ns, rest = rest[1], rest[2:]
        if len(rest) > 3:
            raise _not_found()
        rt = self.registry.find(group, version, rest[0])
        if rt is None or (ns is not None and not rt.namespaced):
            raise _not_found()
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if sub is not None and sub not in rt.subresources:
            raise _not_found()
        self.store.authorizer.require(_ctx(request).user, Attributes(
            self._verb(request, name), group, rt.plural, sub or "", ns or "", name or ""))
        if name is None:
            return await self._collection(request, rt, ns)
        if rt.namespaced and ns is None:
            raise _not_found()
        return await self._object(request, rt, ns, name, sub)

    @staticmethod
    def _verb(request: web.Request, name: str | None) -> str:
        """The RBAC verb of a resource request."""
        method = request.method
        if method == "GET":
            if request.query.get("watch") in ("true", "1"):
                return "watch"
            return "get" if name else "list"
        if method == "DELETE":
            return "delete" if name else "deletecollection"
        return {"POST": "create", "PUT": "update", "PATCH": "patch"}.get(method, method.lower())

    @staticmethod
    async def _body_size(request: web.Request) -> None:
        if (request.content_length or 0) > MAX_BODY_BYTES or len(
                await request.read()) > MAX_BODY_BYTES:
            raise ApiError(413, f"Request entity too large: limit is {MAX_BODY_BYTES}",
                           "RequestEntityTooLarge")

    async def _body(self, request: web.Request) -> Any:
        await self._body_size(request)
        content_type = request.headers.get("Content-Type", "")
        if "protobuf" in content_type:
            raw = await request.read()
            if request.method == "DELETE":
                return None  # DeleteOptions: the defaults are what typed clients send
            return protobuf.decode(raw) if raw else None
        if "cbor" in content_type:
            raise ApiError(415, "the body of the request was in an unknown format - accepted "
                                "media types include: application/json, "
                                "application/vnd.kubernetes.protobuf", "UnsupportedMediaType")
        text = await request.text()
        if not text.strip():
            return None
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise ApiError(400, f"the body of the request could not be decoded as JSON: {exc}",
                           "BadRequest") from exc

    def _respond(self, request: web.Request, rt: ResourceType, objects: list[dict[str, Any]],
                 single: bool, status: int = 200) -> web.Response:
        if table.wants_table(request.headers.get("Accept", "")):
            include = request.query.get("includeObject", "Metadata")
            return _json(table.table(rt, objects, str(self.store.rv), include), status)
        if single:
            return _json(objects[0], status)
        return _json({"kind": rt.list_kind, "apiVersion": rt.api_version,
                      "metadata": {"resourceVersion": str(self.store.rv)}, "items": objects},
                     status)

    async def _collection(self, request: web.Request, rt: ResourceType,
                          ns: str | None) -> web.StreamResponse:
        query = request.query
        labels = label_selector(query.get("labelSelector"))
        fields = field_selector(query.get("fieldSelector"))

        def predicate(obj: dict[str, Any]) -> bool:
            return labels(obj) and fields(obj)

        dry_run = bool(query.get("dryRun"))
        if request.method == "GET":
            if query.get("watch") in ("true", "1"):
                return await serve_watch(request, self.store, rt, ns, predicate, query,
                                         self.bookmark_interval)
            return self._respond(request, rt, self.store.list(rt, ns, predicate), single=False)
        if request.method == "POST":
            created = self.store.create(rt, ns, await self._body(request), dry_run,
                                        _ctx(request))
            return _json(created, 201)
        if request.method == "DELETE":
            body = await self._body(request) or {}
            deleted = [self.store.delete(rt, o["metadata"].get("namespace"),
                                         o["metadata"]["name"], body, dry_run, _ctx(request))
                       for o in self.store.list(rt, ns, predicate)]
            return self._respond(request, rt, deleted, single=False)
        raise ApiError(405, f"{request.method} is not supported on a collection",
                       "MethodNotAllowed")

    async def _object(self, request: web.Request, rt: ResourceType, ns: str | None, name: str,
                      sub: str | None) -> web.StreamResponse:
        dry_run = bool(request.query.get("dryRun"))
        method = request.method
        if sub == "eviction":
            if method != "POST":
                raise ApiError(405, "eviction supports only create", "MethodNotAllowed")
            return _json(self.store.evict(rt, ns, name, await self._body(request)), 201)
        if method == "GET":
            return self._respond(request, rt, [self.store.get(rt, ns, name)], single=True)
        if method == "PUT":
            body = await self._body(request)
            return _json(self.store.update(rt, ns, name, body, sub, dry_run, _ctx(request)))
        if method == "PATCH":
            content_type = request.headers.get("Content-Type", "").split(";")[0].strip()
            if content_type == patch.APPLY:
                await self._body_size(request)
                config = yaml.safe_load(await request.text())
                obj, created = self.store.apply(rt, ns, name, config, sub, dry_run,
                                                _ctx(request))
                return _json(obj, 201 if created else 200)
            if rt.custom and content_type == patch.STRATEGIC:
                raise ApiError(
                    415,
                    f"{patch.STRATEGIC} is not supported by {rt.group}/{rt.version}, "
                    f"Kind={rt.kind}: use --type=merge or --type=json",
                    "UnsupportedMediaType")
            document = await self._body(request)
            return _json(self.store.patch(rt, ns, name, content_type, document, sub, dry_run,
                                          _ctx(request)))
        if method == "DELETE":
            if sub is not None:
                raise _not_found()
            options = await self._body(request) or {}
            if "gracePeriodSeconds" in request.query:
                options["gracePeriodSeconds"] = int(request.query["gracePeriodSeconds"])
            return _json(self.store.delete(rt, ns, name, options, dry_run, _ctx(request)))
        raise ApiError(405, f"{method} is not supported", "MethodNotAllowed")
