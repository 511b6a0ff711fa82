"""A control plane with a real node (`sagatest.cluster.node`), started and stopped as a unit,
and how pods reach the test's services on the host (forwarders on the node's address)."""

from __future__ import annotations

import contextlib
import os
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field

from psycopg.conninfo import conninfo_to_dict, make_conninfo

from sagatest.cluster.control_plane import ControlPlane
from sagatest.cluster.forward import Forwarder
from sagatest.cluster.kube import Kube
from sagatest.cluster.node import Node


def keep_cluster() -> bool:
    """AGENTSAGA_KEEP_CLUSTER=1: keep a control plane's folder after it stops."""
    return os.environ.get("AGENTSAGA_KEEP_CLUSTER") == "1"


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
        plane = ControlPlane(keep=keep_cluster(), node_address=address)
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


__all__ = ["NodeCluster", "keep_cluster", "node_cluster_running"]
