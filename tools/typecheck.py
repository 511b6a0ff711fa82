"""Run mypy --strict on the installed layout of the package, and on the tests.

`sidecar/` and `operator/` are installed as `agentsaga.sidecar` and `agentsaga.operator`
(setup.py), which mypy cannot follow from the source tree; this builds the installed layout out
of symlinks in a temporary folder and checks that, the lab (lab/agentsaga_lab) beside it. The
tests are checked in the same run, under the names pytest gives them: the helpers as the package
`sagatest` (tests/support), each test folder by its own name (`unit.test_static`);
`[[tool.mypy.overrides]]` in pyproject.toml say how strict.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAPPED = {"sidecar": "sidecar", "operator": "operator"}
TESTS = ROOT / "tests"


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="agentsaga-typecheck-") as tmp:
        package = Path(tmp) / "agentsaga"
        package.mkdir()
        for entry in (ROOT / "agentsaga").iterdir():
            if entry.name not in MAPPED and entry.name != "__pycache__":
                (package / entry.name).symlink_to(entry)
        for name, folder in MAPPED.items():
            (package / name).symlink_to(ROOT / folder)
        (Path(tmp) / "agentsaga_lab").symlink_to(ROOT / "lab" / "agentsaga_lab")
        targets = ["-p", "agentsaga", "-p", "agentsaga_lab", "-p", "sagatest"]
        (Path(tmp) / "sagatest").symlink_to(TESTS / "support" / "sagatest")
        for entry in sorted(TESTS.iterdir()):
            if entry.name in ("support", "__pycache__"):
                continue
            (Path(tmp) / entry.name).symlink_to(entry)
            targets += ["-p", entry.name] if entry.is_dir() else ["-m", entry.stem]
        cmd = [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
               "--cache-dir", str(ROOT / ".mypy_cache"), *targets]
        result = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True)
        output = (result.stdout + result.stderr).replace(tmp + "/", "")
        print(output, end="")
        return result.returncode


if __name__ == "__main__":
    raise SystemExit(main())
