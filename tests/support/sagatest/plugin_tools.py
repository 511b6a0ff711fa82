"""Running `kubectl agentsaga ...` as a user does: the real kubectl (tools/bin), which finds the
`kubectl-agentsaga` console script of this environment on PATH."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from sagatest.kube_fixtures import KUBECTL, Kube

PLUGIN_DIR = Path(sys.executable).parent


def kubectl_agentsaga(kube: Kube, *args: str) -> subprocess.CompletedProcess[str]:
    assert (PLUGIN_DIR / "kubectl-agentsaga").exists(), "the package's console scripts are missing"
    env = kube.env()
    env["PATH"] = os.pathsep.join([str(KUBECTL.parent), str(PLUGIN_DIR), env.get("PATH", "")])
    return subprocess.run([str(KUBECTL), "agentsaga", *args], capture_output=True, text=True,
                          timeout=60, env=env)
