"""The image build steps (images/install.sh, used by both Dockerfiles) run here without Docker:
the project is copied as the Dockerfiles' build context sees it, the wheel is built and installed
into a clean virtualenv, and `agentsaga --help` runs from that virtualenv.

To stay fast and offline, the wheel is built without build isolation and installed with
`--no-deps`; the virtualenv borrows the dependencies from this test venv's site-packages through a
.pth file (`--system-site-packages` alone would point at the base interpreter, not this venv).
"""

from __future__ import annotations

import fnmatch
import os
import re
import shutil
import site
import subprocess
import sys
import tomllib
from pathlib import Path

from packaging.specifiers import SpecifierSet
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
IMAGES = ROOT / "images"


def _dockerignore_patterns() -> list[str]:
    lines = (IMAGES / "sidecar.Dockerfile.dockerignore").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def _copy_build_context(target: Path) -> None:
    patterns = _dockerignore_patterns()

    def ignored(directory: str, names: list[str]) -> set[str]:
        rel_dir = Path(directory).relative_to(ROOT)
        out = set()
        for name in names:
            rel = (rel_dir / name).as_posix()
            # as Docker does: a plain pattern is anchored at the root, `**/` matches anywhere
            if any(
                fnmatch.fnmatch(name, p[3:]) if p.startswith("**/") else fnmatch.fnmatch(rel, p)
                for p in patterns
            ):
                out.add(name)
        return out

    shutil.copytree(ROOT, target, ignore=ignored, symlinks=True)


def test_dockerfiles_share_install_script_and_run_as_nonroot() -> None:
    for kind, cmd in (("sidecar", '["sidecar"]'), ("operator", '["operator"')):
        text = (IMAGES / f"{kind}.Dockerfile").read_text()
        # the base pinned by digest, the dependencies installed from the hashed lock
        assert re.search(r"^ARG PYTHON_IMAGE=python:3\.11\.11-slim-bookworm@sha256:[0-9a-f]{64}$",
                         text, re.M)
        assert "sh /wheels/install.sh venv /wheels /opt/venv /wheels/requirements.lock" in text
        assert "cp images/install.sh images/requirements.lock /wheels/" in text
        assert text.count("FROM ${PYTHON_IMAGE}") == 2  # multi-stage: build, then runtime
        assert "install.sh wheel" in text and "install.sh venv" in text
        assert "USER 65532:65532" in text
        assert 'ENTRYPOINT ["agentsaga"]' in text
        assert f"CMD {cmd}" in text


def test_the_lock_pins_every_dependency_with_a_hash() -> None:
    script = (IMAGES / "install.sh").read_text()
    assert '--require-hashes --no-deps --only-binary=:all: -r "$lock"' in script
    entries = re.split(r"\n(?=[A-Za-z])", "\n".join(
        line for line in (IMAGES / "requirements.lock").read_text().splitlines()
        if not line.lstrip().startswith("#")).strip())
    pinned: dict[str, str] = {}
    for entry in entries:
        match = re.match(r"([A-Za-z0-9_.-]+)==(\S+)( ; [^\\]+)? \\\n"
                         r"(\s+--hash=sha256:[0-9a-f]{64}( \\\n)?)+$", entry)
        assert match, entry
        pinned[canonical(match.group(1))] = match.group(2)
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for requirement in project["dependencies"]:
        name = canonical(re.split(r"[\[<>=!~ ;]", requirement, maxsplit=1)[0])
        assert name in pinned, f"{requirement} is not in images/requirements.lock: run " \
                               "make lock"
        specifier = requirement[len(re.split(r"[<>=!~ ;]", requirement, maxsplit=1)[0]):]
        specifier = re.sub(r"^\[[^\]]*\]", "", specifier).strip()
        assert Version(pinned[name]) in SpecifierSet(specifier), (requirement, pinned[name])


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_install_script_builds_wheel_and_installs_a_working_cli(tmp_path: Path) -> None:
    context = tmp_path / "src"
    _copy_build_context(context)
    assert (context / "pyproject.toml").is_file() and not (context / ".venv").exists()
    env = {
        **os.environ,
        "PYTHON": sys.executable,
        "AGENTSAGA_WHEEL_FLAGS": "--no-build-isolation",
        "AGENTSAGA_PIP_FLAGS": "--no-deps --no-index",
    }
    script = str(context / "images" / "install.sh")
    subprocess.run(
        ["sh", script, "wheel", str(context), str(tmp_path / "wheels")],
        check=True,
        env=env,
        capture_output=True,
        timeout=120,
    )
    wheels = list((tmp_path / "wheels").glob("agentsaga-*.whl"))
    assert len(wheels) == 1

    # The venv needs the dependencies before install.sh's own `agentsaga --help` check runs, so the
    # .pth goes in through a venv made first (install.sh's `python -m venv` keeps an existing one).
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=60)
    purelib = next(venv.glob("lib/python*/site-packages"))
    (purelib / "_test_deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    result = subprocess.run(
        ["sh", script, "venv", str(tmp_path / "wheels"), str(venv)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr

    help_run = subprocess.run(
        [str(venv / "bin" / "agentsaga"), "--help"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert help_run.returncode == 0, help_run.stderr
    assert "sidecar" in help_run.stdout
    # the CLI came from the installed wheel, not from this checkout's editable install
    where = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import agentsaga; print(agentsaga.__file__)"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert where.stdout.strip().startswith(str(purelib)), where.stdout
    # the three folders are mapped into the one namespace, the injection module included
    assert (purelib / "agentsaga" / "operator" / "injection.py").is_file()
    assert (purelib / "agentsaga" / "sidecar").is_dir()
