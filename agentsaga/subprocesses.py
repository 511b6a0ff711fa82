"""Stopping the processes agentsaga starts itself (sidecars, jobs, benchmark peers)."""

from __future__ import annotations

import subprocess
from typing import Any


def stop(proc: subprocess.Popen[Any], grace: float = 10.0) -> None:
    """SIGTERM, and SIGKILL if the process is still there after `grace` seconds."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
