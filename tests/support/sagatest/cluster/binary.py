"""Where the control-plane binary is: built from tests/controlplane by tools/controlplane.py into
a cache outside the work tree (the first build takes minutes; later ones return at once)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]  # tests/support/sagatest/cluster/ -> the repository
BUILDER = ROOT / "tools" / "controlplane.py"


def control_plane_binary() -> Path:
    """AGENTSAGA_KUBE_BINARY if set (a binary built elsewhere), else the cached build of this
    checkout's tests/controlplane, built now if missing (its progress goes to stderr)."""
    explicit = os.environ.get("AGENTSAGA_KUBE_BINARY")
    if explicit:
        return Path(explicit)
    result = subprocess.run([sys.executable, "-P", str(BUILDER), "path"], stdout=subprocess.PIPE,
                            text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"{BUILDER} path failed (exit {result.returncode}); see stderr")
    return Path(result.stdout.strip())
