"""`Kube`: what a test needs of a running control plane, in a few plain calls.

The tests set a scene (create a Secret, patch a Job's status, evict a pod) and look at the
result (an AgentRun's status, the requests the operator sent). `Kube` does both over the real
API server as its admin, with JSON over HTTPS and nothing else (no client library between the
test and the server, so a test sees the server's own answers); the product under test uses
the real `kubernetes` client, kopf and kubectl, each with its own identity.

`requests` reads the API server's audit log (`ControlPlane.audit_log`): every request with
its user, user agent and answer, which is how a test asserts on what a client asked for.
"""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from sagatest.cluster.control_plane import ControlPlane

ROOT = Path(__file__).resolve().parents[4]  # tests/support/sagatest/cluster/ -> the repository
KUBECTL = ROOT / "tools" / "bin" / "kubectl"
Obj = dict[str, Any]

# The HTTP method of each audited verb (the audit log records the verb).
_METHODS = {"create": "POST", "update": "PUT", "patch": "PATCH", "delete": "DELETE",
            "deletecollection": "DELETE", "get": "GET", "list": "GET", "watch": "GET"}


class ApiError(RuntimeError):
    """The API server refused a request: `code` is the HTTP status, `body` its Status."""

    def __init__(self, method: str, path: str, code: int, body: Obj) -> None:
        super().__init__(f"{method} {path}: {code} {body.get('message', body)}")
        self.code = code
        self.body = body


@dataclass(frozen=True)
class Request:
    """One request as the API server's audit log has it."""

    method: str
    path: str
    query: str
    verb: str
    user: str
    user_agent: str
    status: int
    stage: str
    annotations: dict[str, str]
    """The audit annotations (e.g. a ValidatingAdmissionPolicy's Audit-action failures)."""
    received: datetime


def _request(event: Obj) -> Request:
    path, _, query = str(event.get("requestURI", "")).partition("?")
    verb = str(event.get("verb", ""))
    return Request(method=_METHODS.get(verb, verb.upper()), path=path, query=query, verb=verb,
                   user=str((event.get("user") or {}).get("username", "")),
                   user_agent=str(event.get("userAgent", "")),
                   status=int((event.get("responseStatus") or {}).get("code", 0)),
                   stage=str(event.get("stage", "")),
                   annotations=dict(event.get("annotations") or {}),
                   received=datetime.fromisoformat(str(event["requestReceivedTimestamp"])))


def api_prefix(api_version: str) -> str:
    """`v1` → /api/v1; `batch/v1` → /apis/batch/v1."""
    return f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"


def object_path(api_version: str, plural: str, namespace: str | None,
                name: str | None = None, subresource: str | None = None) -> str:
    path = api_prefix(api_version)
    if namespace is not None:
        path += f"/namespaces/{namespace}"
    path += f"/{plural}"
    if name is not None:
        path += f"/{name}"
    if subresource is not None:
        path += f"/{subresource}"
    return path


class Kube:
    """The admin's view of a running `ControlPlane`, plus kubectl and the audit log."""

    def __init__(self, plane: ControlPlane, workdir: Path) -> None:
        self.plane = plane
        self.workdir = workdir
        self.kubeconfig = plane.admin_kubeconfig
        self.cache_dir = workdir / "kubecache"
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        self._tls: ssl.SSLContext = plane.admin_tls()
        self._plurals: dict[tuple[str, str], tuple[str, bool]] = {}

    @property
    def url(self) -> str:
        return self.plane.server

    # -- HTTP -----------------------------------------------------------------------------

    def call(self, method: str, path: str, body: Any = None, *,
             content_type: str = "application/json", query: dict[str, str] | None = None,
             timeout: float = 30) -> Any:
        """One request as the admin; the decoded JSON answer. A refusal raises ApiError."""
        url = self.url + path + ("?" + urllib.parse.urlencode(query) if query else "")
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, method=method, headers={
            "Content-Type": content_type, "Accept": "application/json",
            "User-Agent": "sagatest"})
        try:
            with urllib.request.urlopen(request, context=self._tls, timeout=timeout) as answer:
                raw = answer.read()
        except urllib.error.HTTPError as error:
            raw = error.read()
            try:
                status = json.loads(raw)
            except ValueError:
                status = {"message": raw.decode(errors="replace")}
            raise ApiError(method, path, error.code, status) from None
        return json.loads(raw) if raw else None

    def _resource(self, api_version: str, kind: str) -> tuple[str, bool]:
        """(plural, namespaced) of `kind` at `api_version`, from the server's discovery."""
        key = (api_version, kind)
        if key not in self._plurals:
            for resource in self.call("GET", api_prefix(api_version))["resources"]:
                if "/" not in resource["name"]:
                    self._plurals[(api_version, resource["kind"])] = (
                        resource["name"], bool(resource["namespaced"]))
        if key not in self._plurals:
            raise LookupError(f"{kind} is not served at {api_version}")
        return self._plurals[key]

    # -- reads ----------------------------------------------------------------------------

    def get(self, api_version: str, plural: str, namespace: str | None,
            name: str) -> Obj | None:
        """The object, or None when there is none."""
        try:
            found: Obj = self.call("GET", object_path(api_version, plural, namespace, name))
        except ApiError as error:
            if error.code == 404:
                return None
            raise
        return found

    def objects(self, api_version: str, plural: str, namespace: str | None = None) -> list[Obj]:
        """Every object of a kind (in one namespace, or everywhere)."""
        items: list[Obj] = self.call("GET", object_path(api_version, plural, namespace))["items"]
        return items

    def wait_for(self, api_version: str, plural: str, namespace: str | None, name: str,
                 predicate: Callable[[Obj | None], bool], timeout: float = 10.0) -> Obj | None:
        """Until `predicate(object or None)` holds (polled); TimeoutError with the last one."""
        deadline = time.monotonic() + timeout
        while True:
            obj = self.get(api_version, plural, namespace, name)
            if predicate(obj):
                return obj
            if time.monotonic() > deadline:
                raise TimeoutError(f"{plural}/{name}: condition not met in {timeout:g} s; "
                                   f"last seen: {obj!r}")
            time.sleep(0.05)

    @property
    def requests(self) -> list[Request]:
        """Every answered request so far, in the order the API server finished them (watches
        also once as they start: stage ResponseStarted)."""
        try:
            lines = self.plane.audit_log.read_text().splitlines()
        except FileNotFoundError:
            return []
        events = []
        for line in lines:
            try:
                events.append(json.loads(line))
            except ValueError:
                continue  # the line being written
        return [_request(e) for e in events]

    # -- writes ---------------------------------------------------------------------------

    def create(self, obj: Obj) -> Obj:
        plural, namespaced = self._resource(obj["apiVersion"], obj["kind"])
        namespace = (obj.get("metadata") or {}).get("namespace", "default") if namespaced \
            else None
        created: Obj = self.call("POST", object_path(obj["apiVersion"], plural, namespace), obj)
        return created

    def patch(self, api_version: str, plural: str, namespace: str | None, name: str,
              body: Any, *, subresource: str | None = None,
              content_type: str = "application/merge-patch+json") -> Obj:
        patched: Obj = self.call("PATCH", object_path(api_version, plural, namespace, name,
                                                      subresource), body,
                                 content_type=content_type)
        return patched

    def patch_status(self, api_version: str, plural: str, namespace: str | None, name: str,
                     status: Obj) -> Obj:
        """Merge-patch `{"status": status}` through the status subresource."""
        return self.patch(api_version, plural, namespace, name, {"status": status},
                          subresource="status")

    def delete(self, api_version: str, plural: str, namespace: str | None, name: str,
               grace_period_seconds: int | None = None) -> Obj:
        options: Obj = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        deleted: Obj = self.call("DELETE", object_path(api_version, plural, namespace, name),
                                 options)
        return deleted

    def evict(self, namespace: str, name: str) -> Obj:
        """Through the pods/eviction subresource (a PodDisruptionBudget may refuse: 429)."""
        evicted: Obj = self.call(
            "POST", object_path("v1", "pods", namespace, name, "eviction"),
            {"apiVersion": "policy/v1", "kind": "Eviction",
             "metadata": {"name": name, "namespace": namespace}})
        return evicted

    def apply(self, *docs: Obj) -> None:
        """`kubectl apply` (server side) of `docs`, as the admin."""
        applied = self.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-",
                               input=json.dumps({"apiVersion": "v1", "kind": "List",
                                                 "items": list(docs)}))
        if applied.returncode != 0:
            raise AssertionError(f"kubectl apply failed:\n{applied.stderr}")

    def apply_file(self, path: str | Path) -> None:
        self.apply(*[d for d in yaml.safe_load_all(Path(path).read_text()) if d])

    def install_crds(self, directory: str | Path) -> None:
        """Apply every CRD of `directory` and wait until each is Established (served)."""
        paths = sorted(Path(directory).glob("*.yaml"))
        crds = [d for p in paths for d in yaml.safe_load_all(p.read_text()) if d]
        self.apply(*crds)
        for crd in crds:
            self.wait_for("apiextensions.k8s.io/v1", "customresourcedefinitions", None,
                          crd["metadata"]["name"], _established, timeout=30)

    # -- identities -----------------------------------------------------------------------

    def service_account_token(self, namespace: str, name: str,
                              expiration_seconds: int = 3600) -> str:
        """A TokenRequest token of ServiceAccount `namespace/name` (what its pods mount)."""
        answer = self.call("POST", object_path("v1", "serviceaccounts", namespace, name,
                                               "token"),
                           {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                            "spec": {"expirationSeconds": expiration_seconds}})
        return str(answer["status"]["token"])

    # -- kubectl --------------------------------------------------------------------------

    def env(self, kubeconfig: Path | None = None) -> dict[str, str]:
        """Environment for a subprocess (kubectl, kopf, the CLI) that talks to this cluster."""
        env = {k: v for k, v in os.environ.items() if not k.upper().endswith("_PROXY")}
        env.update(KUBECONFIG=str(kubeconfig or self.kubeconfig),
                   KUBECACHEDIR=str(self.cache_dir), HOME=str(self.workdir),
                   NO_PROXY="127.0.0.1,localhost")
        return env

    def kubectl(self, *args: str, input: str | None = None, timeout: float = 60,
                check: bool = False,
                kubeconfig: Path | None = None) -> subprocess.CompletedProcess[str]:
        """tools/bin/kubectl as the admin (or as whoever `kubeconfig` names)."""
        if not KUBECTL.exists():
            raise FileNotFoundError(f"{KUBECTL} is missing: run `make tools`")
        config = kubeconfig or self.kubeconfig
        return subprocess.run([str(KUBECTL), "--kubeconfig", str(config), *args], input=input,
                              capture_output=True, text=True, timeout=timeout,
                              env=self.env(config), check=check)


@contextmanager
def kubectl_proxy(kube: Kube) -> Iterator[str]:
    """`kubectl proxy` in front of the API server: plain HTTP on loopback with the admin's
    credentials added, as an operator of a real cluster would give a client; yields its URL."""
    if not KUBECTL.exists():
        raise FileNotFoundError(f"{KUBECTL} is missing: run `make tools`")
    proc = subprocess.Popen([str(KUBECTL), "--kubeconfig", str(kube.kubeconfig), "proxy",
                             "--port=0"], stdout=subprocess.PIPE, text=True, env=kube.env())
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # "Starting to serve on 127.0.0.1:PORT"
        if "Starting to serve on" not in line:
            raise RuntimeError(f"kubectl proxy did not start: {line!r}")
        yield "http://" + line.rsplit(" ", 1)[1].strip()
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _established(crd: Obj | None) -> bool:
    conditions: Sequence[Obj] = ((crd or {}).get("status") or {}).get("conditions") or []
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)


__all__ = ["ApiError", "Kube", "Request", "kubectl_proxy", "object_path"]
