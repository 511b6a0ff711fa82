"""Running the `agentsaga` command as a user does: a fresh process, in a chosen directory, with
the current directory kept off the import path (`-P`, like the installed console script)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def agentsaga(*args: str, cwd: Path, env: dict[str, str] | None = None,
              timeout: float = 120) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-P", "-m", "agentsaga.cli", *args],
                          capture_output=True, text=True, timeout=timeout, cwd=cwd, env=full_env)
