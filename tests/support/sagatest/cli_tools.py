"""Running the `agentsaga` command as a user does: a fresh process, in a chosen directory, with
the current directory kept off the import path (`-P`, like the installed console script); and
Python code in a fresh process that runs the very package the test imported."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import agentsaga as imported_agentsaga


def agentsaga(*args: str, cwd: Path, env: dict[str, str] | None = None,
              timeout: float = 120) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-P", "-m", "agentsaga.cli", *args],
                          capture_output=True, text=True, timeout=timeout, cwd=cwd, env=full_env)


def imported_package_python(script: str, *args: str) -> list[str]:
    """The command that runs `script` (its `sys.argv[1:]` being `args`) in a fresh process
    importing the very package this test imported (under `make mutate`, the mutant's, from the
    folder mutmut runs in). Neither PYTHONPATH nor the current directory is on its path (`-P`):
    the repository's `operator` package would shadow the stdlib's."""
    package = str(Path(imported_agentsaga.__file__).resolve().parent.parent)
    return [sys.executable, "-P", "-c", "import sys; sys.path.insert(0, sys.argv.pop(1))\n"
            + script, package, *args]
