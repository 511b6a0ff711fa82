"""`make dist`: what this repository ships, built from the current source into dist/ (git
ignores it), until a release is published to an index:

    agentsaga-<v>-py3-none-any.whl         the product: sidecar, Jobs, CLI, operator ([operator])
    agentsaga_client-<v>-py3-none-any.whl  the agent side (client/): the client and the adapters
    agentsaga_lab-<v>-py3-none-any.whl     the lab (lab/): the world, the demo, chaos, the bench
    agentsaga-<chart v>.tgz                the Helm chart (`helm package charts/agentsaga`)

    python -P tools/dist.py [OUT]          # OUT: dist/ by default

The wheels are built by uv (`uv build --wheel`, the build backend pyproject.toml pins) from a
copy of the source, so nothing is written into the checkout; the chart by tools/bin/helm
(`make tools`). Install a wheel with its locked dependencies, e.g. the agent side into an
agent's environment:

    uv pip install -r images/agent.requirements.lock
    uv pip install --no-deps dist/agentsaga_client-*.whl
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
UV = ROOT / ".uv" / "bin" / "uv"
HELM = ROOT / "tools" / "bin" / "helm"
CHART = ROOT / "charts" / "agentsaga"

SOURCES = ("agentsaga", "sidecar", "operator", "client", "lab", "setup.py", "pyproject.toml",
           "README.md", "LICENSE", "uv.lock")
"""What the wheels are built from: the product's folders, the agent side's and the lab's."""
PROJECTS = (".", "client", "lab")
"""The distributions, each a folder of the copy with its pyproject.toml."""
SKIPPED = shutil.ignore_patterns("__pycache__", "*.egg-info", "*.pyc", "build", ".mypy_cache")


def build(out: Path) -> list[Path]:
    """Every wheel and the chart's package into `out` (emptied first); the files made."""
    if not HELM.exists():
        raise SystemExit(f"{HELM.relative_to(ROOT)} is missing: run `make tools` first")
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    with tempfile.TemporaryDirectory(prefix="agentsaga-dist-") as temporary:
        source = Path(temporary)
        for name in SOURCES:
            path = ROOT / name
            if path.is_dir():
                shutil.copytree(path, source / name, ignore=SKIPPED)
            else:
                shutil.copy2(path, source / name)
        for project in PROJECTS:
            subprocess.run([str(UV), "build", "--quiet", "--wheel", "--out-dir", str(out),
                            str(source / project)], check=True, cwd=source)
    subprocess.run([str(HELM), "package", str(CHART), "--destination", str(out)], check=True,
                   stdout=subprocess.DEVNULL)
    return sorted(p for p in out.iterdir() if p.suffix in (".whl", ".tgz"))


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else ROOT / "dist"
    for path in build(out.resolve()):
        print(f"{path.stat().st_size / 1024:8.0f} KiB  {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
