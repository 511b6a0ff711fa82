"""Check the layer rules ([tool.importlinter] in pyproject.toml) with `lint-imports`.

`sidecar/` and `operator/` are installed as `agentsaga.sidecar` and `agentsaga.operator`
(setup.py), which the import graph cannot follow from the source tree (nor from an editable
install): as tools/typecheck.py does, this builds the installed layout out of symlinks in a
temporary folder, the lab beside it, and runs `lint-imports` on that.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAPPED = {"sidecar": "sidecar", "operator": "operator"}


def installed_layout(into: Path) -> None:
    """agentsaga/ with sidecar/ and operator/ inside it, and agentsaga_lab/, as symlinks."""
    package = into / "agentsaga"
    package.mkdir()
    for entry in (ROOT / "agentsaga").iterdir():
        if entry.name not in MAPPED and entry.name != "__pycache__":
            (package / entry.name).symlink_to(entry)
    for name, folder in MAPPED.items():
        (package / name).symlink_to(ROOT / folder)
    (into / "agentsaga_lab").symlink_to(ROOT / "lab" / "agentsaga_lab")


def lint(layout: Path, args: list[str],
         capture_output: bool = False) -> subprocess.CompletedProcess[str]:
    """`lint-imports` with the contracts of pyproject.toml over the packages in `layout`."""
    env = {**os.environ, "PYTHONPATH": str(layout)}
    command = Path(sys.executable).with_name("lint-imports")
    return subprocess.run([str(command), "--no-cache", *args, str(ROOT / "pyproject.toml")],
                          cwd=layout, env=env, text=True, capture_output=capture_output)


def main(args: list[str]) -> int:
    with tempfile.TemporaryDirectory(prefix="agentsaga-layers-") as tmp:
        installed_layout(Path(tmp))
        return lint(Path(tmp), args).returncode


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
