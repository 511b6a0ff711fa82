"""A real Kubernetes control plane on loopback for the tests: etcd, kube-apiserver,
kube-controller-manager and kube-scheduler, the way controller-runtime's envtest starts them, with
the differences a product test needs:

- authorization is RBAC (and Node), never AlwaysAllow: a refusal in a test is the refusal a
  cluster would give;
- the controller-manager runs (Jobs, garbage collection, namespaces, service accounts and their
  tokens, the disruption controller, ...), so the ServiceAccount admission plugin stays on and
  every namespace gets its `default` ServiceAccount and `kube-root-ca.crt`;
- identities are client certificates from a client CA (the admin is O=system:masters; the
  controller-manager and the scheduler are their own users, limited by the bootstrap policy) or
  TokenRequest tokens of ServiceAccounts;
- etcd keeps its data in memory (/dev/shm) without fsync, and the API server compacts it every
  few seconds, so a test can provoke a watch's 410 Gone;
- the API server writes an audit log (metadata of every request: who, what, the answer), which
  is how a test sees what a client asked (`sagatest.cluster.kube.Kube.requests`).

With `node_address` (a test node's IP: `sagatest.cluster.node`), the API server also serves on
that address (pods reach it there, through the `kubernetes` Service), advertises it as that
Service's endpoint, names it in its certificate, reaches the kubelet by its InternalIP, and
authenticates to it with a client certificate; the endpoint-slice controller runs, so that
kube-proxy routes Services. Without one, no node runs pods: the scheduler finds no Node.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import ssl
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any

from sagatest.cluster import pki
from sagatest.cluster.binary import control_plane_binary
from sagatest.cluster.processes import Component, ComponentFailed, free_port

# The controller-manager's controllers the product meets (1.37's names; `--help` lists them),
# plus the one that type-checks ValidatingAdmissionPolicies into their status. Node lifecycle
# stays off: there are no kubelets to report, it would only taint the nodes a test registers.
CONTROLLERS = (
    "job-controller", "garbage-collector-controller", "namespace-controller",
    "serviceaccount-controller", "serviceaccount-token-controller", "disruption-controller",
    "ttl-after-finished-controller", "replicaset-controller", "deployment-controller",
    "clusterrole-aggregation-controller", "root-ca-certificate-publisher-controller",
    "validatingadmissionpolicy-status-controller",
)
# With a real node: Services route (kube-proxy reads EndpointSlices); pods of a deleted node
# or an unscheduled terminating pod are collected.
NODE_CONTROLLERS = ("endpointslice-controller", "pod-garbage-collector-controller")
# On top of 1.37's default plugins (which already include ServiceAccount, PodSecurity,
# MutatingAdmissionWebhook, ValidatingAdmissionPolicy and ValidatingAdmissionWebhook; naming them
# keeps them on whatever the defaults become): NodeRestriction, as kubeadm enables it.
ADMISSION_PLUGINS = ("NodeRestriction", "MutatingAdmissionWebhook", "ValidatingAdmissionPolicy",
                     "ValidatingAdmissionWebhook")
SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
READY_TIMEOUT = 120.0
# Every request at the Metadata level, once it is answered (watches also when they start).
AUDIT_POLICY = {"apiVersion": "audit.k8s.io/v1", "kind": "Policy",
                "omitStages": ["RequestReceived"], "rules": [{"level": "Metadata"}]}


ADMIN = "agentsaga-test-admin"
"""The admin's username (a client certificate in group system:masters)."""
PREFIX = "agentsaga-cluster-"
OWNER = "owner.pid"


def _scratch_root() -> str | None:
    """/dev/shm when there is one: etcd's data in memory costs the tests no disk writes."""
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and shm.stat().st_mode & 0o002 else None


def _remove_orphans(root: Path) -> None:
    """Remove the folders of control planes whose test process was killed outright (its
    children die with it, but its folder stays, and in /dev/shm that is memory)."""
    for folder in root.glob(PREFIX + "*"):
        try:
            owner = int((folder / OWNER).read_text())
        except (OSError, ValueError):
            continue  # being created, or not ours
        try:
            os.kill(owner, 0)
        except ProcessLookupError:
            shutil.rmtree(folder, ignore_errors=True)
        except PermissionError:
            pass  # another user's live process


class ControlPlane:
    """etcd + kube-apiserver + kube-controller-manager + kube-scheduler, started and stopped as
    a unit (also usable as a context manager). Everything lives in one temporary folder that
    `stop()` removes (set `keep=True` to keep it for a post-mortem)."""

    def __init__(self, binary: Path | None = None, *, compaction_interval: float = 10.0,
                 extra_apiserver_args: Sequence[str] = (), keep: bool = False,
                 node_address: str | None = None) -> None:
        self._binary = binary
        self.node_address = node_address
        self.compaction_interval = compaction_interval
        self.extra_apiserver_args = list(extra_apiserver_args)
        self.keep = keep
        root = _scratch_root()
        _remove_orphans(Path(root or tempfile.gettempdir()))
        self.workdir = Path(tempfile.mkdtemp(prefix=PREFIX, dir=root))
        (self.workdir / OWNER).write_text(str(os.getpid()))
        self.pki = self.workdir / "pki"
        self.logs = self.workdir / "logs"
        self.users = self.workdir / "users"
        for folder in (self.pki, self.logs, self.users):
            folder.mkdir()
        self.etcd_port = free_port()
        self.apiserver_port = free_port()
        self.server = f"https://127.0.0.1:{self.apiserver_port}"
        self.etcd_url = f"http://127.0.0.1:{self.etcd_port}"
        self._server_ca = pki.Authority("agentsaga-test-server-ca")
        self.server_authority = self._server_ca
        """The CA every client trusts (a test node's kubelet serves with its certificate)."""
        self._client_ca = pki.Authority("agentsaga-test-client-ca")
        self.ca_pem: bytes = self._server_ca.cert_pem
        self.admin_kubeconfig = self.users / "admin.kubeconfig"
        self.audit_log = self.logs / "audit.log"
        self._components: dict[str, Component] = {}
        self.startup_seconds: float | None = None
        self.starting: list[tuple[datetime, datetime]] = []
        """When the API server was starting (launched, /readyz not yet 200): a real one answers
        requests then, and refuses them (403) until its authorizer has read the RBAC objects."""
        self._write_credentials()

    # -- set-up ---------------------------------------------------------------------------

    def _write_credentials(self) -> None:
        (self.pki / "server-ca.crt").write_bytes(self._server_ca.cert_pem)
        (self.pki / "client-ca.crt").write_bytes(self._client_ca.cert_pem)
        self._server_ca.serving("kube-apiserver", [
            "127.0.0.1", "localhost", "10.0.0.1", "kubernetes", "kubernetes.default",
            "kubernetes.default.svc", "kubernetes.default.svc.cluster.local",
            *([self.node_address] if self.node_address else []),
        ]).write(self.pki / "apiserver.crt", self.pki / "apiserver.key")
        # how the API server authenticates to kubelets (logs, exec): a superuser, as kubeadm's
        self._client_ca.client("kube-apiserver-kubelet-client", ["system:masters"]).write(
            self.pki / "apiserver-kubelet-client.crt", self.pki / "apiserver-kubelet-client.key")
        private, public = pki.service_account_key()
        (self.pki / "sa.key").write_bytes(private)
        (self.pki / "sa.key").chmod(0o600)
        (self.pki / "sa.pub").write_bytes(public)
        admin = self._client_ca.client(ADMIN, ["system:masters"])
        admin.write(self.pki / "admin.crt", self.pki / "admin.key")
        pki.write_kubeconfig(self.admin_kubeconfig, server=self.server, ca_pem=self.ca_pem,
                             user="admin", client=admin)
        for user in ("system:kube-controller-manager", "system:kube-scheduler"):
            self.user_kubeconfig(user, name=user.removeprefix("system:"))
        (self.workdir / "audit-policy.json").write_text(json.dumps(AUDIT_POLICY))

    @property
    def binary(self) -> Path:
        if self._binary is None:
            self._binary = control_plane_binary()
        return self._binary

    def _component(self, name: str, *args: str) -> Component:
        return Component(name, [str(self.binary), name, *args], self.logs / f"{name}.log")

    def _etcd(self) -> Component:
        peer = f"http://127.0.0.1:{free_port()}"
        return self._component(
            "etcd", "--name=test", f"--data-dir={self.workdir / 'etcd'}",
            f"--listen-client-urls={self.etcd_url}", f"--advertise-client-urls={self.etcd_url}",
            f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=test={peer}", "--initial-cluster-state=new",
            "--unsafe-no-fsync=true", "--log-level=warn")

    def _apiserver(self) -> Component:
        pki_dir = self.pki
        return self._component(
            "kube-apiserver",
            f"--etcd-servers={self.etcd_url}",
            f"--etcd-compaction-interval={self.compaction_interval:g}s",
            *self._network_args(),
            f"--secure-port={self.apiserver_port}",
            f"--tls-cert-file={pki_dir / 'apiserver.crt'}",
            f"--tls-private-key-file={pki_dir / 'apiserver.key'}",
            f"--client-ca-file={pki_dir / 'client-ca.crt'}",
            f"--cert-dir={self.workdir / 'apiserver-certs'}",
            "--authorization-mode=Node,RBAC",
            f"--enable-admission-plugins={','.join(ADMISSION_PLUGINS)}",
            f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
            f"--service-account-key-file={pki_dir / 'sa.pub'}",
            f"--service-account-signing-key-file={pki_dir / 'sa.key'}",
            f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
            "--allow-privileged=true",
            "--profiling=false",
            f"--audit-policy-file={self.workdir / 'audit-policy.json'}",
            f"--audit-log-path={self.audit_log}", "--audit-log-format=json",
            "--audit-log-mode=blocking",
            *self.extra_apiserver_args)

    def _network_args(self) -> list[str]:
        if self.node_address is None:
            # 1.37 refuses a loopback address in the `kubernetes` Service's endpoints; nothing
            # here routes to them anyway (no pod network), so the Service keeps none
            return ["--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
                    "--endpoint-reconciler-type=none"]
        # loopback for the tests' clients, the node's address for its pods (the `kubernetes`
        # Service's endpoint); the kubelet is reached by its InternalIP (no DNS for its name)
        return ["--bind-address=0.0.0.0", f"--advertise-address={self.node_address}",
                "--kubelet-preferred-address-types=InternalIP",
                f"--kubelet-certificate-authority={self.pki / 'server-ca.crt'}",
                f"--kubelet-client-certificate={self.pki / 'apiserver-kubelet-client.crt'}",
                f"--kubelet-client-key={self.pki / 'apiserver-kubelet-client.key'}"]

    def _controller_manager(self) -> Component:
        controllers = CONTROLLERS + (NODE_CONTROLLERS if self.node_address else ())
        return self._component(
            "kube-controller-manager",
            f"--kubeconfig={self.users / 'kube-controller-manager.kubeconfig'}",
            "--leader-elect=false", "--secure-port=0",
            f"--controllers={','.join(controllers)}",
            f"--root-ca-file={self.pki / 'server-ca.crt'}",
            f"--service-account-private-key-file={self.pki / 'sa.key'}",
            "--use-service-account-credentials=true")

    def _scheduler(self) -> Component:
        return self._component(
            "kube-scheduler",
            f"--kubeconfig={self.users / 'kube-scheduler.kubeconfig'}",
            "--leader-elect=false", "--secure-port=0")

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        """Start everything and wait until the API server is ready and the controller-manager
        has made the `default` ServiceAccount (the sign that controllers are running)."""
        binary = self.binary  # built (or found) before the start-up clock starts
        if not binary.exists():
            raise FileNotFoundError(f"no control-plane binary at {binary}")
        started = time.monotonic()
        try:
            self._launch("etcd", self._etcd())
            self._wait("etcd", "to report healthy", self._etcd_healthy)
            self.start_apiserver()
            self._launch("kube-controller-manager", self._controller_manager())
            self._launch("kube-scheduler", self._scheduler())
            self._wait("kube-controller-manager", "to create the default ServiceAccount",
                       lambda: self._get("/api/v1/namespaces/default/serviceaccounts/default")
                       is not None)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - started

    def start_apiserver(self) -> None:
        launched = datetime.now(UTC)
        self._launch("kube-apiserver", self._apiserver())
        self._wait("kube-apiserver", "to answer /readyz", self._apiserver_ready)
        self.starting.append((launched, datetime.now(UTC)))

    def was_starting(self, moment: datetime) -> bool:
        """Whether the API server was starting (not yet ready) at `moment`."""
        return any(launched <= moment <= ready for launched, ready in self.starting)

    def stop_apiserver(self, *, grace: float = 3.0) -> None:
        """Stop the API server alone (etcd and the controllers keep running), as an API server
        restart or outage looks to a client; `grace=0` kills it outright, as a crash."""
        component = self._components.pop("kube-apiserver", None)
        if component is not None:
            component.stop(grace)

    def restart_apiserver(self, *, grace: float = 3.0) -> None:
        """Stop the API server and start it again on the same port with the same state."""
        self.stop_apiserver(grace=grace)
        self.start_apiserver()

    def stop(self) -> None:
        """Stop every component (the API server's clients first, etcd last) and remove the
        temporary folder unless `keep`."""
        for name in ("kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"):
            component = self._components.pop(name, None)
            if component is not None:
                component.stop()
        if not self.keep:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def check(self) -> None:
        """Raise ComponentFailed if a component has exited since it started."""
        for component in self._components.values():
            component.check()

    def __enter__(self) -> ControlPlane:
        self.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()

    def _launch(self, name: str, component: Component) -> None:
        self._components[name] = component
        component.start()

    def _wait(self, name: str, what: str, ready: Callable[[], bool],
              timeout: float = READY_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while True:
            self.check()
            try:
                if ready():
                    return
            except (OSError, ValueError):
                pass  # not listening yet, or still starting
            if time.monotonic() > deadline:
                raise self._components[name].failure(f"did not become ready ({what}) "
                                                     f"within {timeout:g} s")
            time.sleep(0.1)

    # -- talking to it --------------------------------------------------------------------

    def admin_tls(self) -> ssl.SSLContext:
        """A TLS context that trusts the API server and authenticates as the admin."""
        context = ssl.create_default_context(cadata=self.ca_pem.decode())
        context.load_cert_chain(self.pki / "admin.crt", self.pki / "admin.key")
        return context

    def _get(self, path: str) -> Any:
        """GET as the admin; the decoded JSON, or None on 404."""
        try:
            with urllib.request.urlopen(self.server + path, context=self.admin_tls(),
                                        timeout=5) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as error:
            if error.code == 404:
                return None
            raise

    def get_json(self, path: str) -> Any:
        """GET `path` as the admin; the decoded JSON, or None on 404."""
        return self._get(path)

    def untaint_node(self, name: str) -> None:
        """Remove Node `name`'s taints (the kubelet registers it `not-ready:NoSchedule`, and
        only the node-lifecycle controller, which does not run here, would lift that)."""
        request = urllib.request.Request(
            f"{self.server}/api/v1/nodes/{name}", method="PATCH",
            data=json.dumps({"spec": {"taints": None}}).encode(),
            headers={"Content-Type": "application/merge-patch+json"})
        with urllib.request.urlopen(request, context=self.admin_tls(), timeout=10):
            pass

    def _apiserver_ready(self) -> bool:
        with urllib.request.urlopen(self.server + "/readyz", context=self.admin_tls(),
                                    timeout=5) as response:
            return bool(response.status == 200)

    def _etcd_post(self, path: str, body: dict[str, Any]) -> Any:
        request = urllib.request.Request(self.etcd_url + path, data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=5) as response:
            return json.loads(response.read())

    def _etcd_healthy(self) -> bool:
        with urllib.request.urlopen(self.etcd_url + "/health", timeout=5) as response:
            return bool(json.loads(response.read()).get("health") == "true")

    def compact(self) -> int:
        """Compact etcd up to its current revision now (rather than waiting for the API
        server's periodic compaction): a watch or list resumed from an older resourceVersion
        then meets 410 Gone once the API server's watch cache has moved past it. Returns
        the revision compacted to."""
        header = self._etcd_post("/v3/kv/range", {"key": "AA==", "limit": 1})["header"]
        revision = int(header["revision"])
        self._etcd_post("/v3/kv/compaction", {"revision": revision, "physical": True})
        return revision

    def remove_from_etcd(self, key: str) -> int:
        """Delete `key` (e.g. `/registry/pods/NS/NAME`) in etcd itself, behind the API server's
        back: an object that is gone without any watch event for it, as one deleted while a
        client's watches were down looks to that client. Returns how many keys went."""
        encoded = base64.b64encode(key.encode()).decode()
        answer = self._etcd_post("/v3/kv/deleterange", {"key": encoded})
        return int(answer.get("deleted", 0))

    # -- identities -----------------------------------------------------------------------

    def user_kubeconfig(self, user: str, groups: Sequence[str] = (), *,
                        name: str | None = None, path: Path | None = None) -> Path:
        """A kubeconfig that authenticates as `user` in `groups` with a client certificate
        (what RBAC then allows is up to the test's RoleBindings)."""
        client = self._client_ca.client(user, groups)
        path = path or self.users / f"{name or user.replace(':', '_')}.kubeconfig"
        return pki.write_kubeconfig(path, server=self.server, ca_pem=self.ca_pem, user=user,
                                    client=client)

    def service_account_kubeconfig(self, namespace: str, name: str, *,
                                   expiration_seconds: int = 3600) -> Path:
        """A kubeconfig holding a TokenRequest token of ServiceAccount `namespace/name`, as
        `kubectl create token` makes one (the ServiceAccount must exist)."""
        from kubernetes import client, config  # the real client, as the operator uses it

        api = config.new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=str(self.admin_kubeconfig))
        try:
            request = client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(
                audiences=[], expiration_seconds=expiration_seconds))
            response = client.CoreV1Api(api).create_namespaced_service_account_token(
                name, namespace, request)
        finally:
            api.close()
        assert response.status is not None, response
        token = str(response.status.token)
        path = self.users / f"sa-{namespace}-{name}.kubeconfig"
        return pki.write_kubeconfig(path, server=self.server, ca_pem=self.ca_pem,
                                    user=f"system:serviceaccount:{namespace}:{name}",
                                    token=token)

    def log(self, component: str) -> Path:
        """The log file of a component (`etcd`, `kube-apiserver`, ...)."""
        return self.logs / f"{component}.log"


__all__ = ["ADMIN", "ComponentFailed", "ControlPlane"]
