"""The stand-in's fixtures, for its own conformance tests."""

from sagatest.kube_fixtures import kube, kube_with_crds

__all__ = ["kube", "kube_with_crds"]
