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

from collections.abc import Iterator

import pytest

from sagatest.cluster.control_plane import ControlPlane
from sagatest.cluster.kube import ROOT, Kube
from sagatest.cluster.node_cluster import NodeCluster, keep_cluster, node_cluster_running

CRDS = ROOT / "crds"


def _keep() -> bool:
    return keep_cluster()


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


@pytest.fixture(scope="module")
def node_cluster() -> Iterator[NodeCluster]:
    with node_cluster_running() as cluster:
        yield cluster
