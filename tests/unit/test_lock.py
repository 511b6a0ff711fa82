"""One lock for every environment: uv.lock agrees with pyproject.toml, and the requirements
files exported from it (the images', the bench peers') are what it exports today."""

from __future__ import annotations

import importlib.util
import re
import subprocess
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


def test_a_changed_pyproject_fails_the_check(tmp_path: Path) -> None:
    # the check above can fail: a dependency added to a copy of the project is not in its lock
    # (one the lock holds already, so that the offline resolution finds it)
    (tmp_path / "lab").mkdir()
    for name in ("pyproject.toml", "uv.lock", "setup.py", "README.md", "lab/pyproject.toml",
                 "lab/README.md"):
        (tmp_path / name).write_bytes((ROOT / name).read_bytes())
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace(
        '"jsonschema>=4",', '"jsonschema>=4",\n    "click>=8",', 1))
    result = subprocess.run([str(lock.UV), "lock", "--check", "--offline"], cwd=tmp_path,
                            capture_output=True, text=True)
    assert result.returncode != 0
    assert "needs to be updated" in result.stderr


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
