"""The control-plane fixtures.

`control_plane`: one real control plane per test session (per xdist worker), started on first
use; its start-up (about 4 seconds on 2 cores, once the binary is built) is paid once, and the
tests that share it isolate themselves by namespace.

`kube`: a fresh control plane of a test's own, as `Kube` (its admin's view); the end-to-end
tests that install the chart, run the operator and evict pods take this one, so no state
(CRDs, cluster roles, admission policies, leases) crosses from one test to the next.

`node_cluster`: a control plane with a real node (`sagatest.cluster.node`: kubelet, containerd,
runc, a CNI bridge, kube-proxy), one per test module (its start costs a few seconds and one node
runs on a machine at a time); the tests of a module isolate themselves by namespace.

AGENTSAGA_KEEP_CLUSTER=1 keeps a control plane's folder (certificates, kubeconfigs, logs, the
audit log) after it stops, for a post-mortem.
"""

from __future__ import annotations

import contextlib
import os
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from sagatest.cluster.control_plane import ControlPlane
from sagatest.cluster.forward import Forwarder
from sagatest.cluster.kube import ROOT, Kube
from sagatest.cluster.node import Node

CRDS = ROOT / "crds"


def _keep() -> bool:
    return os.environ.get("AGENTSAGA_KEEP_CLUSTER") == "1"


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    plane = ControlPlane(keep=_keep())
    plane.start()
    try:
        yield plane
    finally:
        plane.stop()


@pytest.fixture
def kube() -> Iterator[Kube]:
    plane = ControlPlane(keep=_keep())
    plane.start()
    try:
        yield Kube(plane, plane.workdir)
    finally:
        plane.stop()


@pytest.fixture
def kube_with_crds(kube: Kube) -> Kube:
    """`kube` with the product's CRDs (crds/: AgentRun) served, and nothing of the chart: no
    RBAC, no approval policy (the admin writes what a test needs)."""
    kube.install_crds(CRDS)
    return kube


@dataclass
class NodeCluster:
    """A control plane and its real node; `kube` is the admin's view, `address` the node's IP
    (where pods reach the host: `forward` a loopback service there)."""

    kube: Kube
    node: Node
    address: str
    startup_seconds: float
    forwarders: list[Forwarder] = field(default_factory=list)
    _pg_ports: dict[str, int] = field(default_factory=dict)

    def forward(self, port: int, host: str = "127.0.0.1") -> int:
        """A port on the node's address that reaches `host:port` of this machine."""
        forwarder = Forwarder(self.address, (host, port)).start()
        self.forwarders.append(forwarder)
        return forwarder.port

    def url_for_pods(self, url: str) -> str:
        """`url` (http://127.0.0.1:PORT/...) as pods reach it: through a forwarder."""
        parts = urllib.parse.urlsplit(url)
        port = self.forward(parts.port or 80, parts.hostname or "127.0.0.1")
        return urllib.parse.urlunsplit(parts._replace(netloc=f"{self.address}:{port}"))

    def dsn_for_pods(self, dsn: str) -> str:
        """A Postgres DSN as pods reach that server: TCP to a forwarder on the node's address
        (the tests' Postgres listens on loopback or a Unix socket)."""
        params = conninfo_to_dict(dsn)
        host = str(params.get("host") or "127.0.0.1")
        port = int(params.get("port") or 5432)
        target: tuple[str, int] | str = (f"{host}/.s.PGSQL.{port}" if host.startswith("/")
                                         else (host, port))
        key = str(target)
        if key not in self._pg_ports:
            forwarder = Forwarder(self.address, target).start()
            self.forwarders.append(forwarder)
            self._pg_ports[key] = forwarder.port
        params.update(host=self.address, port=str(self._pg_ports[key]))
        return make_conninfo(**params)  # type: ignore[arg-type]

    def close(self) -> None:
        for forwarder in self.forwarders:
            forwarder.stop()


@contextlib.contextmanager
def node_cluster_running() -> Iterator[NodeCluster]:
    """A control plane serving on a real node's address, and that node, Ready."""
    started = time.monotonic()
    node = Node()
    plane: ControlPlane | None = None
    try:
        address = node.prepare()
        plane = ControlPlane(keep=_keep(), node_address=address)
        plane.start()
        node.start(plane)
        cluster = NodeCluster(Kube(plane, plane.workdir), node, address,
                              time.monotonic() - started)
        try:
            yield cluster
        finally:
            cluster.close()
    finally:
        node.stop()
        if plane is not None:
            plane.stop()


@pytest.fixture(scope="module")
def node_cluster() -> Iterator[NodeCluster]:
    with node_cluster_running() as cluster:
        yield cluster
