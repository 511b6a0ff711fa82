"""Pytest fixtures for the Kubernetes API stand-in (sagatest.kubeapi).

`kube` yields a running stand-in with a kubeconfig and a `kubectl()` runner (the real kubectl 1.37
from tools/bin, with an isolated discovery cache); `kube_with_crds` is the same with every CRD of
crds/ already served. Import both from tests/conftest.py. `kubectl_proxy` puts the real
`kubectl proxy` in front of a stand-in (the bench's smoke test, tools/bench_operator_scale.py).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from sagatest.kubeapi import KubeStandIn
from sagatest.kubeapi.kubeconfig import write_kubeconfig

ROOT = Path(__file__).resolve().parents[3]  # tests/support/sagatest/ -> the repository
KUBECTL = ROOT / "tools" / "bin" / "kubectl"
CRDS = ROOT / "crds"


class Kube(KubeStandIn):
    """The stand-in plus what a test needs to point real clients at it."""

    def __init__(self, workdir: Path) -> None:
        super().__init__()
        self.workdir = workdir
        self.kubeconfig = workdir / "kubeconfig"
        self.cache_dir = workdir / "kubecache"

    def start(self) -> Kube:
        super().start()
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        write_kubeconfig(self.kubeconfig, self.url)
        return self

    def env(self) -> dict[str, str]:
        """Environment for a subprocess (kubectl, kopf, the CLI) that should use the stand-in."""
        env = {k: v for k, v in os.environ.items() if not k.upper().endswith("_PROXY")}
        env.update(KUBECONFIG=str(self.kubeconfig), KUBECACHEDIR=str(self.cache_dir),
                   HOME=str(self.workdir), NO_PROXY="127.0.0.1,localhost")
        return env

    def kubectl(self, *args: str, input: str | None = None, timeout: float = 60,
                check: bool = False) -> subprocess.CompletedProcess[str]:
        """Run tools/bin/kubectl against the stand-in; stdout/stderr captured as text."""
        if not KUBECTL.exists():
            raise FileNotFoundError(f"{KUBECTL} is missing: run `make tools`")
        return subprocess.run(
            [str(KUBECTL), "--kubeconfig", str(self.kubeconfig), *args],
            input=input, capture_output=True, text=True, timeout=timeout, env=self.env(),
            check=check,
        )


@contextmanager
def kubectl_proxy(kube: Kube) -> Iterator[str]:
    """`kubectl proxy` in front of the stand-in: plain HTTP on loopback, the kubeconfig's
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


@pytest.fixture
def kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kube]:
    """A fresh, empty stand-in (namespaces default, kube-system, … exist)."""
    stand_in = Kube(tmp_path_factory.mktemp("kube")).start()
    try:
        yield stand_in
    finally:
        stand_in.stop()


@pytest.fixture
def kube_with_crds(kube: Kube) -> Kube:
    """`kube` with every CRD in crds/ (AgentRun) served."""
    kube.install_crds(CRDS)
    return kube
