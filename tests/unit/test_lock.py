"""One lock for every environment: uv.lock agrees with pyproject.toml, and the requirements
files exported from it (the images', the bench peers') are what it exports today."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import tomllib
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _lock_tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("lock_tool", ROOT / "tools" / "lock.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


lock = _lock_tool()


def test_uv_is_the_pinned_one() -> None:
    version = subprocess.run([str(lock.UV), "--version"], check=True, capture_output=True,
                             text=True).stdout.split()[1]
    pinned = re.search(r"^uv==(\S+)", (ROOT / "tools" / "uv-requirements.txt").read_text(), re.M)
    required = re.search(r'required-version = "==(\S+)"', (ROOT / "pyproject.toml").read_text())
    assert pinned and required and version == pinned.group(1) == required.group(1)


def test_the_lock_agrees_with_pyproject() -> None:
    result = subprocess.run([str(lock.UV), "lock", "--check", "--offline"], cwd=ROOT,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr + "\nrun `make lock ARGS=` and commit uv.lock"


def _check_offline(project: Path, cache: Path) -> subprocess.CompletedProcess[str]:
    """`uv lock --check --offline` in `project`, with a uv cache of its own that starts empty:
    what it answers depends on the project alone, not on what this machine's cache holds (a
    lock that agrees needs no index; one that does not is resolved again, which offline and
    without a cache cannot succeed, so it fails whatever the cache would have let it find)."""
    return subprocess.run([str(lock.UV), "lock", "--check", "--offline", "--verbose"],
                          cwd=project, capture_output=True, text=True,
                          env={**os.environ, "UV_CACHE_DIR": str(cache)})


def test_a_changed_pyproject_fails_the_check(tmp_path: Path) -> None:
    # the check above can fail: a dependency added to a copy of the project is not in its lock
    project = tmp_path / "project"
    members = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["uv"]["workspace"][
        "members"]
    for folder in (".", *members):  # what uv reads of the workspace: each member's project
        (project / folder).mkdir(parents=True, exist_ok=True)
        for name in ("pyproject.toml", "setup.py", "README.md"):
            if (ROOT / folder / name).exists():
                (project / folder / name).write_bytes((ROOT / folder / name).read_bytes())
    (project / "uv.lock").write_bytes((ROOT / "uv.lock").read_bytes())
    cache = tmp_path / "uv-cache"
    unchanged = _check_offline(project, cache)
    assert unchanged.returncode == 0, unchanged.stderr  # the copy alone passes, so does its lock
    pyproject = project / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace(
        '"jsonschema>=4",', '"jsonschema>=4",\n    "click>=8",', 1))
    changed = _check_offline(project, cache)
    assert changed.returncode != 0
    # and it fails because the lock no longer holds what the project requires
    mismatch = re.search(r"Resolving despite existing lockfile due to mismatched requirements "
                         r"for: `agentsaga==[^`]+`\n\s*Requested: (.*)\n\s*Existing: (.*)\n",
                         changed.stderr)
    assert mismatch, changed.stderr
    requested, existing = mismatch.groups()
    assert 'PackageName("click")' in requested and 'PackageName("click")' not in existing


@pytest.mark.parametrize("path", sorted(lock.EXPORTS), ids=lambda p: p.name)
def test_each_export_is_what_the_lock_exports(path: Path) -> None:
    assert path.read_text() == lock.exported(lock.EXPORTS[path]), \
        f"{path.relative_to(ROOT)} is stale: run `make lock ARGS=`"


def test_every_exported_pin_carries_a_hash() -> None:
    for path in lock.EXPORTS:
        pins = re.findall(r"^([A-Za-z0-9_.-]+)==\S+", path.read_text(), re.M)
        hashed = re.findall(r"^[A-Za-z0-9_.-]+==[^\n]*\\\n\s+--hash=sha256:[0-9a-f]{64}",
                            path.read_text(), re.M)
        assert pins and len(pins) == len(hashed), path


def test_bench_peers_install_only_hashed_packages() -> None:
    peers = (ROOT / "lab" / "agentsaga_lab" / "bench" / "peers.py").read_text()
    assert '"--require-hashes"' in peers
