"""A real Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager,
kube-scheduler) on loopback for the tests, built from Go modules by tools/controlplane.py.
`ControlPlane` starts one; `sagatest.cluster.fixtures` shares one per test session."""

from sagatest.cluster.control_plane import ComponentFailed, ControlPlane

__all__ = ["ComponentFailed", "ControlPlane"]
