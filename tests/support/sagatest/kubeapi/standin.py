"""KubeStandIn: the server on its own thread and event loop, with a direct Python API.

The direct API reads and writes the same store the HTTP clients see (the ground truth for tests);
every call runs on the server's loop, so it is ordered with the HTTP traffic.
"""

from __future__ import annotations

import asyncio
import copy
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import yaml
from aiohttp import web

from . import tls
from .admission import AuditRecord
from .auth import SA_PREFIX, UserInfo, user
from .errors import ApiError
from .resources import Registry, ResourceType
from .server import ApiServer, RequestRecord
from .store import Store

T = TypeVar("T")
Obj = dict[str, Any]


class KubeStandIn:
    """A Kubernetes API stand-in. `start()` binds 127.0.0.1 on `port` (0: a free port)."""

    def __init__(self, port: int = 0, bookmark_interval: float = 2.0,
                 history_limit: int = 5000) -> None:
        self.port = port
        self.registry = Registry()
        self._bookmark_interval = bookmark_interval
        self._history_limit = history_limit
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._changed = threading.Condition()
        self._changes = 0
        self._store: Store | None = None
        self._server: ApiServer | None = None

    # ---- lifecycle -------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def start(self) -> KubeStandIn:
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self._serve())
            except BaseException as exc:  # reported to start()
                failure.append(exc)
                ready.set()
                return
            ready.set()
            loop.run_forever()
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

        self._thread = threading.Thread(target=run, name="kube-stand-in", daemon=True)
        self._thread.start()
        ready.wait(10)
        if failure:
            raise failure[0]
        return self

    async def _serve(self) -> None:
        self._store = Store(self.registry, self._history_limit)
        self._store.listeners.append(self._notify)
        self._server = ApiServer(self.registry, self._store, self._bookmark_interval)
        self._runner = web.AppRunner(self._server.app, shutdown_timeout=1.0, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self.port,
                           ssl_context=tls.server_context())
        await site.start()
        sockets = getattr(site._server, "sockets", None) or []
        self.port = sockets[0].getsockname()[1]
        self._server.address = f"127.0.0.1:{self.port}"

    def _notify(self) -> None:
        with self._changed:
            self._changes += 1
            self._changed.notify_all()

    def stop(self) -> None:
        loop = self._loop
        if loop is None or self._thread is None:
            return

        async def shutdown() -> None:
            assert self._store is not None and self._runner is not None
            for watcher in list(self._store.watchers):
                watcher.queue.put_nowait(None)
            await self._runner.cleanup()

        asyncio.run_coroutine_threadsafe(shutdown(), loop).result(15)
        loop.call_soon_threadsafe(loop.stop)
        self._thread.join(15)
        self._loop = None

    def __enter__(self) -> KubeStandIn:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- plumbing --------------------------------------------------------------------------

    def _call(self, fn: Callable[[Store], T]) -> T:
        """Run `fn(store)` on the server loop and return its result (or raise its ApiError)."""
        assert self._loop is not None, "the stand-in is not running"

        async def run() -> T:
            assert self._store is not None
            return fn(self._store)

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(10)

    def resource(self, api_version: str, plural_or_kind: str) -> ResourceType:
        """The served type for `("agentsaga.io/v1alpha1", "agentruns")` or `(…, "AgentRun")`."""
        group, _, version = api_version.rpartition("/")
        rt = self.registry.find(group, version, plural_or_kind) or self.registry.by_kind(
            api_version, plural_or_kind)
        if rt is None:
            raise LookupError(f"{plural_or_kind} is not served at {api_version}")
        return rt

    # ---- reads -----------------------------------------------------------------------------

    def get(self, api_version: str, plural: str, namespace: str | None, name: str) -> Obj | None:
        """The object as stored, or None when absent."""
        rt = self.resource(api_version, plural)
        try:
            return self._call(lambda s: s.get(rt, namespace, name))
        except ApiError as exc:
            if exc.code == 404:
                return None
            raise

    def objects(self, api_version: str, plural: str, namespace: str | None = None) -> list[Obj]:
        """All objects of a kind (in one namespace, or everywhere)."""
        rt = self.resource(api_version, plural)
        return self._call(lambda s: s.list(rt, namespace))

    @property
    def resource_version(self) -> int:
        return self._call(lambda s: s.rv)

    @property
    def requests(self) -> list[RequestRecord]:
        """Every HTTP request received so far, in order."""
        assert self._server is not None
        return list(self._server.requests)

    # ---- writes ----------------------------------------------------------------------------

    def create(self, obj: Obj) -> Obj:
        rt = self.resource(obj["apiVersion"], obj["kind"])
        namespace = (obj.get("metadata") or {}).get("namespace")
        return self._call(lambda s: s.create(rt, namespace, copy.deepcopy(obj)))

    def apply_file(self, path: str | Path) -> list[Obj]:
        """Create every document of a YAML file (CRDs become served at once)."""
        docs = [d for d in yaml.safe_load_all(Path(path).read_text()) if d]
        return [self.create(d) for d in docs]

    def install_crds(self, directory: str | Path) -> list[Obj]:
        """Create every CRD found in `directory` (e.g. the project's `crds/`)."""
        out: list[Obj] = []
        for path in sorted(Path(directory).glob("*.yaml")):
            out.extend(self.apply_file(path))
        return out

    def patch(self, api_version: str, plural: str, namespace: str | None, name: str,
              body: Any, *, subresource: str | None = None,
              content_type: str = "application/merge-patch+json") -> Obj:
        rt = self.resource(api_version, plural)
        return self._call(lambda s: s.patch(rt, namespace, name, content_type, body, subresource))

    def patch_status(self, api_version: str, plural: str, namespace: str | None, name: str,
                     status: Obj) -> Obj:
        """Merge-patch `{"status": status}` through the status subresource."""
        return self.patch(api_version, plural, namespace, name, {"status": status},
                          subresource="status")

    def delete(self, api_version: str, plural: str, namespace: str | None, name: str,
               grace_period_seconds: int | None = None) -> Obj:
        rt = self.resource(api_version, plural)
        options = {} if grace_period_seconds is None else {
            "gracePeriodSeconds": grace_period_seconds}
        return self._call(lambda s: s.delete(rt, namespace, name, options))

    def remove_now(self, api_version: str, plural: str, namespace: str | None,
                   name: str) -> Obj:
        """Remove at once, ignoring finalizers and grace (a kubelet finishing a pod)."""
        rt = self.resource(api_version, plural)
        return self._call(lambda s: s.remove_now(rt, namespace, name))

    def evict(self, namespace: str, name: str) -> Obj:
        """What a policy/v1 Eviction does: DisruptionTarget condition, then a delete."""
        rt = self.resource("v1", "pods")
        return self._call(lambda s: s.evict(rt, namespace, name, {}))

    # ---- identities ------------------------------------------------------------------------

    def add_token(self, token: str, username: str, groups: tuple[str, ...] = ()) -> str:
        """Make bearer `token` authenticate as `username` (service accounts get their groups)."""
        assert self._server is not None, "the stand-in is not running"
        self._server.authenticator.tokens[token] = user(username, groups)
        return token

    def service_account_token(self, namespace: str, name: str) -> str:
        """A bearer token of ServiceAccount `namespace/name` (what a pod would mount)."""
        return self.add_token(f"sa-{namespace}-{name}", f"{SA_PREFIX}{namespace}:{name}")

    def identity(self, token: str) -> UserInfo | None:
        assert self._server is not None, "the stand-in is not running"
        return self._server.authenticator.tokens.get(token)

    @property
    def audit(self) -> list[AuditRecord]:
        """Messages of ValidatingAdmissionPolicy bindings with validationActions Audit."""
        return self._call(lambda s: list(s.admission.audit))

    # ---- behaviour knobs -------------------------------------------------------------------

    def compact(self) -> None:
        """Forget the watch history: resuming a watch from any RV seen so far gets 410 Gone."""
        self._call(lambda s: s.compact())

    def enforce_admission_policies(self, enabled: bool = True) -> None:
        """False: keep ValidatingAdmissionPolicies as objects but evaluate none of them, as a
        server started with --disable-admission-plugins=ValidatingAdmissionPolicy."""
        def set_(s: Store) -> None:
            s.admission.enabled = enabled
        self._call(set_)

    def block_evictions(self, blocked: bool = True) -> None:
        """Make evictions fail with 429, as a PodDisruptionBudget would."""
        def set_(s: Store) -> None:
            s.evictions_blocked = blocked
        self._call(set_)

    def graceful_pod_deletion(self, enabled: bool = True) -> None:
        """Deleted pods keep running with a deletionTimestamp until `remove_now` (no kubelet)."""
        def set_(s: Store) -> None:
            s.graceful_pod_deletion = enabled
        self._call(set_)

    # ---- waiting ---------------------------------------------------------------------------

    def wait_for(self, api_version: str, plural: str, namespace: str | None, name: str,
                 predicate: Callable[[Obj | None], bool], timeout: float = 10.0) -> Obj | None:
        """Block until `predicate(object or None)` holds; re-checked on every store change."""
        deadline = time.monotonic() + timeout
        while True:
            with self._changed:
                seen = self._changes
            obj = self.get(api_version, plural, namespace, name)
            if predicate(obj):
                return obj
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"{plural}/{name}: condition not met in {timeout}s; "
                                   f"last seen: {obj!r}")
            with self._changed:
                if self._changes == seen:
                    self._changed.wait(remaining)
