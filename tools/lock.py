"""Refresh uv.lock and the requirements files exported from it.

    make lock            # what the registry serves today, within pyproject.toml's ranges
    make lock ARGS=      # only re-resolve what pyproject.toml changed (keeps every other pin)

uv.lock is the one lock of every environment the project installs: the core, each extra, the
test tools, the lab (lab/, a workspace member) and the bench's peers, each package with the
sha256 of its archives. Two installers cannot read it, so they get a requirements file exported
from it (pip `--require-hashes`):

- images/<image>.requirements.lock: what each image installs (tools/images.py builds them): the
  sidecar's the core and [stripe] (never the Kubernetes client), the operator's the core and
  [operator] (no vendor SDK), the refund example's agent the agent side alone (client/:
  `agentsaga-client`, no database driver, no Kubernetes client);
- lab/agentsaga_lab/bench/peers/requirements.txt: the peers `agentsaga bench` installs into its own
  virtual environment (the lab's `bench-peers` dependency group).

tests/unit/test_lock.py fails when pyproject.toml, uv.lock and these exports disagree.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
UV = ROOT / ".uv" / "bin" / "uv"

EXPORTS: dict[Path, list[str]] = {
    ROOT / "images" / "sidecar.requirements.lock": ["--no-dev", "--extra", "stripe"],
    ROOT / "images" / "operator.requirements.lock": ["--no-dev", "--extra", "operator"],
    ROOT / "images" / "agent.requirements.lock": ["--no-dev", "--package", "agentsaga-client"],
    ROOT / "lab" / "agentsaga_lab" / "bench" / "peers" / "requirements.txt":
        ["--package", "agentsaga-lab", "--only-group", "bench-peers"],
}
"""Each exported file and the `uv export` flags that select its packages."""


def exported(flags: list[str]) -> str:
    """What `uv export` writes for `flags` from the lock as it is (never re-resolving)."""
    return subprocess.run(
        [str(UV), "export", "--frozen", "--no-emit-workspace", "--quiet", *flags],
        cwd=ROOT, check=True, capture_output=True, text=True).stdout


def main(args: list[str]) -> None:
    subprocess.run([str(UV), "lock", *args], cwd=ROOT, check=True)
    for path, flags in EXPORTS.items():
        path.write_text(exported(flags))
        print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main(sys.argv[1:])
