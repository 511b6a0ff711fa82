"""Running `kubectl agentsaga ...` as a user does: the real kubectl (tools/bin), which finds the
`kubectl-agentsaga` console script of this environment on PATH."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from sagatest.cluster.kube import KUBECTL, Kube

PLUGIN_DIR = Path(sys.executable).parent


def kubectl_agentsaga(kube: Kube, *args: str,
                      kubeconfig: Path | None = None) -> subprocess.CompletedProcess[str]:
    """As the cluster's admin, or as whoever `kubeconfig` authenticates."""
    assert (PLUGIN_DIR / "kubectl-agentsaga").exists(), "the package's console scripts are missing"
    env = kube.env(kubeconfig)
    env["PATH"] = os.pathsep.join([str(KUBECTL.parent), str(PLUGIN_DIR), env.get("PATH", "")])
    return subprocess.run([str(KUBECTL), "agentsaga", *args], capture_output=True, text=True,
                          timeout=60, env=env)
