"""Run mypy --strict on the installed layout of the package.

`sidecar/` and `operator/` are installed as `agentsaga.sidecar` and `agentsaga.operator`
(setup.py), which mypy cannot follow from the source tree; this builds the installed layout out of
symlinks in a temporary folder and checks that.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAPPED = {"sidecar": "sidecar", "operator": "operator"}


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="agentsaga-typecheck-") as tmp:
        package = Path(tmp) / "agentsaga"
        package.mkdir()
        for entry in (ROOT / "agentsaga").iterdir():
            if entry.name not in MAPPED and entry.name != "__pycache__":
                (package / entry.name).symlink_to(entry)
        for name, folder in MAPPED.items():
            (package / name).symlink_to(ROOT / folder)
        cmd = [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
               "--cache-dir", str(ROOT / ".mypy_cache"), "-p", "agentsaga"]
        result = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True)
        output = (result.stdout + result.stderr).replace(tmp + "/", "")
        print(output, end="")
        return result.returncode


if __name__ == "__main__":
    raise SystemExit(main())
