"""The test node: what a kubelet does for the pods the real scheduler binds to it, for a machine
without a container runtime.

`NodeAgent(plane, workdir)` registers a Node (Ready, with room for 110 pods) and, on a thread,
looks at the pods bound to it every 50 ms:

- **Job pods run for real.** Their containers' commands (the product's `agentsaga ...`: see
  `pod_config.command_line`) run as local processes with the environment a kubelet would give
  them (Secrets, ConfigMaps and the downward API resolved, volumes written as files into the
  pod's folder and the paths that name them rewritten). Their exit codes go to the pod's status,
  so the real Job controller completes or fails the Job (and applies its podFailurePolicy).
- **Every other pod is simulated**, as kwok does: reported Running until it is deleted. The
  operator's Deployment and the agents' pods are processes the tests start themselves (with
  their own credentials), since no image of theirs runs here.
- **Deletion is graceful**, as a kubelet's: a pod with a deletionTimestamp (an eviction, a
  delete) gets SIGTERM in every container, SIGKILL after its grace period, and is then removed
  with grace 0 and its uid as precondition.

It talks to the API server as the admin: the node's own identity (system:node:NAME) would
also need the Node authorizer's view of the pod's Secrets, which a test gains nothing from.
The not-ready taint the API server puts on a new Node is removed at registration, since no
node-lifecycle controller runs to do it.

`output(namespace, name)` is everything the pod's containers printed.
"""

from __future__ import annotations

import contextlib
import functools
import json
import signal
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sagatest.cluster import pod_config
from sagatest.cluster.containers import Container, now
from sagatest.cluster.control_plane import ControlPlane
from sagatest.cluster.kube import ROOT

Obj = dict[str, Any]
NODE = "sagatest-node"
TICK = 0.05


class NodeAgent:
    def __init__(self, plane: ControlPlane, workdir: Path, name: str = NODE) -> None:
        self.plane = plane
        self.workdir = workdir
        self.name = name
        self._tls: ssl.SSLContext = plane.admin_tls()
        self._pods: dict[str, PodRun] = {}  # by uid
        self._folders: dict[tuple[str, str], Path] = {}  # the newest pod of each name
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"node-{name}", daemon=True)
        self.error: BaseException | None = None
        self._pulling = threading.Event()

    # -- the API --------------------------------------------------------------------------

    def call(self, method: str, path: str, body: Any = None,
             content_type: str = "application/merge-patch+json") -> Any:
        """One request as the admin; the decoded answer, or None on 404."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.plane.server + path, data=data, method=method,
                                         headers={"Content-Type": content_type,
                                                  "User-Agent": f"sagatest-node/{self.name}"})
        try:
            with urllib.request.urlopen(request, context=self._tls, timeout=30) as answer:
                raw = answer.read()
        except urllib.error.HTTPError as error:
            if error.code == 404:
                return None
            failure = f"{method} {path}: {error.code} {error.read()[:500]!r}"
            if error.code >= 500:
                raise Unreachable(failure) from None
            raise RuntimeError(failure) from None
        except OSError as error:  # refused, reset, timed out: the API server is away
            raise Unreachable(f"{method} {path}: {error}") from None
        return json.loads(raw) if raw else None

    # -- life -----------------------------------------------------------------------------

    def start(self) -> NodeAgent:
        self._register()
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop looking and kill every process of every pod."""
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        for run in self._pods.values():
            run.kill()

    @contextlib.contextmanager
    def pulling_images(self) -> Iterator[None]:
        """While inside: no container starts (a pod bound to the node waits, Pending, as for
        a slow image pull); what was running keeps running. For a test that must look at the
        cluster between a Job's creation and its pod's start, whatever the machine's speed."""
        self._pulling.set()
        try:
            yield
        finally:
            self._pulling.clear()

    @property
    def pulling(self) -> bool:
        """Whether containers are held from starting (`pulling_images`)."""
        return self._pulling.is_set()

    def output(self, namespace: str, name: str) -> str:
        """What the containers of pod `namespace/name` (the newest of that name) printed."""
        folder = self._folders.get((namespace, name))
        if folder is None:
            return ""
        return "".join(log.read_text(errors="replace") for log in sorted(folder.glob("*.log")))

    def _register(self) -> None:
        self.call("POST", "/api/v1/nodes", {
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": self.name, "labels": {
                "kubernetes.io/hostname": self.name, "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64"}}}, content_type="application/json")
        room = {"cpu": "32", "memory": "64Gi", "pods": "110", "ephemeral-storage": "100Gi"}
        stamp = now()
        self.call("PATCH", f"/api/v1/nodes/{self.name}/status", {"status": {
            "capacity": room, "allocatable": room,
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"},
                          {"type": "Hostname", "address": self.name}],
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "the test node is ready", "lastHeartbeatTime": stamp,
                            "lastTransitionTime": stamp}],
            "nodeInfo": {"kubeletVersion": "v1.37.2", "operatingSystem": "linux",
                         "architecture": "amd64", "containerRuntimeVersion": "sagatest://1",
                         "kernelVersion": "", "osImage": "", "kubeProxyVersion": "",
                         "machineID": "", "systemUUID": "", "bootID": ""}}})
        self.call("PATCH", f"/api/v1/nodes/{self.name}", {"spec": {"taints": None}})

    def _run(self) -> None:
        try:
            while not self._stopping.wait(TICK):
                with contextlib.suppress(Unreachable):
                    # as a kubelet does while its API server restarts: the pods keep running,
                    # and what they report is sent at the next tick that reaches it
                    self._tick()
        except BaseException as exc:  # kept for the test to see: a node that stopped
            self.error = exc
            raise

    def _tick(self) -> None:
        selector = urllib.parse.quote(f"spec.nodeName={self.name}")
        listed = self.call("GET", f"/api/v1/pods?fieldSelector={selector}") or {"items": []}
        present = {}
        for pod in listed["items"]:
            uid = pod["metadata"]["uid"]
            present[uid] = pod
            if uid not in self._pods:
                run = PodRun(pod, self.workdir / f"{pod['metadata']['namespace']}_"
                                                 f"{pod['metadata']['name']}_{uid[:8]}", self)
                self._pods[uid] = run
                self._folders[(run.namespace, run.name)] = run.folder
        for uid, run in list(self._pods.items()):
            pod = present.get(uid)
            if pod is None:  # removed (by us, or forced): nothing of it may keep running
                run.kill()
                del self._pods[uid]
                continue
            run.step(pod)


def _expand_in(env: dict[str, str], value: str) -> str:
    return pod_config.expand(value, env)


class Unreachable(RuntimeError):
    """The API server did not answer (not listening, or a 5xx while it starts)."""


class PodRun:
    """One pod on the node: its containers and what it reports."""

    def __init__(self, pod: Obj, folder: Path, node: NodeAgent) -> None:
        meta, spec = pod["metadata"], pod["spec"]
        self.node = node
        self.uid: str = meta["uid"]
        self.namespace: str = meta["namespace"]
        self.name: str = meta["name"]
        self.folder = folder
        self.real = any(o.get("kind") == "Job" for o in meta.get("ownerReferences") or [])
        self.account: str = spec.get("serviceAccountName") or "default"
        policy = spec.get("restartPolicy", "Always")
        self.init = [Container(c, c.get("restartPolicy") or "OnFailure", self.uid,
                               folder / f"init-{c['name']}.log", init=True)
                     for c in spec.get("initContainers") or []]
        self.main = [Container(c, policy, self.uid, folder / f"{c['name']}.log")
                     for c in spec["containers"]]
        self.started = now()
        self.prepared: dict[str, tuple[list[str] | None, dict[str, str]]] | None = None
        self.reported: Obj | None = None
        self.terminating_since: float | None = None
        self.removed = False

    # -- preparing ------------------------------------------------------------------------

    def _prepare(self, pod: Obj) -> None:
        """Volumes written, each container's command line and environment resolved; a missing
        Secret leaves the containers waiting (CreateContainerConfigError) for the next tick."""
        if self.prepared is not None:
            return
        if not self.real:
            self.prepared = {c.name: (None, {}) for c in (*self.init, *self.main)}
            return
        try:
            sources = pod_config.Sources(self.namespace, lambda path: self.node.call("GET", path))
            volumes: dict[str, Path] = {}
            for volume in pod["spec"].get("volumes") or []:
                local = self.folder / "volumes" / volume["name"]
                pod_config.write_volume(volume, local, pod, sources, self._token)
                volumes[volume["name"]] = local
            server = urllib.parse.urlsplit(self.node.plane.server)
            base = pod_config.base_environment(pod, server.hostname or "127.0.0.1",
                                               server.port or 443, self.folder / "home")
            (self.folder / "home").mkdir(parents=True, exist_ok=True)
            prepared = {}
            for container in (*self.init, *self.main):
                mounts = pod_config.mount_table(container.spec, volumes)
                env = pod_config.environment(pod, container.spec, sources, mounts, base)
                argv = pod_config.command_line(container.spec, functools.partial(
                    _expand_in, env))
                if argv is not None:
                    argv = [argv[0], *(mounts.argument(a) for a in argv[1:])]
                prepared[container.name] = (argv, env)
        except pod_config.PodConfigError as exc:
            for container in (*self.init, *self.main):
                container.fail_to_start("CreateContainerConfigError", str(exc))
            return
        self.prepared = prepared

    def _token(self, source: Obj) -> str:
        return str(self.node.call("POST", f"/api/v1/namespaces/{self.namespace}/serviceaccounts/"
                                  f"{self.account}/token", {
                                      "apiVersion": "authentication.k8s.io/v1",
                                      "kind": "TokenRequest", "spec": {
                                          "expirationSeconds": source.get("expirationSeconds",
                                                                          3600)}},
                                  content_type="application/json")["status"]["token"])

    def _start(self, container: Container) -> None:
        assert self.prepared is not None
        argv, env = self.prepared[container.name]
        container.start(argv, env, ROOT)

    # -- running --------------------------------------------------------------------------

    def step(self, pod: Obj) -> None:
        if self.removed:
            return
        if pod["metadata"].get("deletionTimestamp"):
            self._terminate(pod)
        else:
            self._prepare(pod)
            if self.prepared is not None and not self.node.pulling:
                self._advance()
        for container in (*self.init, *self.main):
            container.poll()
        self._report()

    def _advance(self) -> None:
        for container in self.init:
            container.poll()
            if container.state == "waiting":
                self._start(container)
            if container.sidecar:
                continue
            if container.state == "running":
                return  # the next ones wait for this init container
            if container.exit_code != 0:
                if container.should_restart() and time.monotonic() >= container.next_start:
                    self._start(container)
                return
        done = self._main_done()
        for container in self.main:
            container.poll()
            if container.state == "waiting" or (not done and container.should_restart()
                  and time.monotonic() >= container.next_start):
                self._start(container)
        if self._main_done():
            for sidecar in self.init:
                if sidecar.sidecar:
                    sidecar.signal(signal.SIGTERM)

    def _main_done(self) -> bool:
        return all(c.state == "terminated" and not c.should_restart() for c in self.main)

    def _terminate(self, pod: Obj) -> None:
        """SIGTERM now, SIGKILL after the grace period, then remove the pod."""
        grace = float(pod["metadata"].get("deletionGracePeriodSeconds") or 0)
        if self.terminating_since is None:
            self.terminating_since = time.monotonic()
            for container in (*self.main, *self.init):
                container.signal(signal.SIGTERM)
        elif time.monotonic() - self.terminating_since >= grace:
            for container in (*self.main, *self.init):
                container.signal(signal.SIGKILL)
        for container in (*self.init, *self.main):
            container.poll()
        if all(c.state != "running" for c in (*self.init, *self.main)):
            self._report()
            self.node.call("DELETE", f"/api/v1/namespaces/{self.namespace}/pods/{self.name}",
                           {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0,
                            "preconditions": {"uid": self.uid}}, content_type="application/json")
            self.removed = True

    def kill(self) -> None:
        for container in (*self.init, *self.main):
            container.signal(signal.SIGKILL)
            if container.process is not None:
                with contextlib.suppress(Exception):
                    container.process.wait(timeout=5)

    # -- reporting ------------------------------------------------------------------------

    def _phase(self) -> str:
        if self.main and self._main_done():
            return "Succeeded" if all(c.exit_code == 0 for c in self.main) else "Failed"
        if any(c.state == "running" for c in self.main):
            return "Running"
        failed_init = [c for c in self.init if not c.sidecar and c.state == "terminated"
                       and c.exit_code != 0 and not c.should_restart()]
        return "Failed" if failed_init else "Pending"

    def _report(self) -> None:
        phase = self._phase()
        ready = phase == "Running" and all(c.state == "running" for c in self.main)
        initialized = all(c.sidecar or (c.state == "terminated" and c.exit_code == 0)
                          for c in self.init)
        status: Obj = {
            "phase": phase, "hostIP": "127.0.0.1", "podIP": "127.0.0.1",
            "hostIPs": [{"ip": "127.0.0.1"}], "podIPs": [{"ip": "127.0.0.1"}],
            "startTime": self.started,
            "conditions": [
                _condition("PodScheduled", True), _condition("Initialized", initialized),
                _condition("ContainersReady", ready), _condition("Ready", ready)],
            "containerStatuses": [c.status() for c in self.main],
        }
        if self.init:
            status["initContainerStatuses"] = [c.status() for c in self.init]
        comparable = {**status, "conditions": [
            {k: v for k, v in c.items() if k != "lastTransitionTime"}
            for c in status["conditions"]]}
        if comparable == self.reported:
            return
        self.node.call("PATCH", f"/api/v1/namespaces/{self.namespace}/pods/{self.name}/status",
                       {"metadata": {"uid": self.uid}, "status": status})
        self.reported = comparable


def _condition(kind: str, true: bool) -> Obj:
    return {"type": kind, "status": "True" if true else "False", "lastTransitionTime": now()}


__all__ = ["NODE", "NodeAgent"]
