"""The layer rules are contracts that `lint-imports` checks (tools/lint_imports.py, `make lint`):
the product never imports the lab; the core never imports the sidecar or the operator; those two
never import each other; only the store imports psycopg, only the operator kopf; no two parts
of the core import each other, even through a third. These tests run
them, fail when one is removed or loosened, and prove that each one catches a planted breach.
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("lint_imports", ROOT / "tools" / "lint_imports.py")
assert _spec is not None and _spec.loader is not None
lint_imports = importlib.util.module_from_spec(_spec)
sys.modules["lint_imports"] = lint_imports
_spec.loader.exec_module(lint_imports)

FRONT_ENDS = {"agentsaga.sidecar", "agentsaga.operator"}

EXPECTED: dict[str, dict[str, Any]] = {
    "product-without-lab": {"type": "forbidden", "source_modules": ["agentsaga"],
                            "forbidden_modules": ["agentsaga_lab"]},
    "core-without-front-ends": {"type": "forbidden",
                                "forbidden_modules": sorted(FRONT_ENDS)},
    "front-ends-apart": {"type": "independence", "modules": sorted(FRONT_ENDS)},
    "only-store-psycopg": {"type": "protected", "protected_modules": ["psycopg", "psycopg_pool"],
                           "allowed_importers": ["agentsaga.store"]},
    "only-operator-kopf": {"type": "protected",
                           "protected_modules": ["jsonpatch", "kopf", "kubernetes"],
                           "allowed_importers": ["agentsaga.operator"]},
    "only-connector-stripe": {"type": "protected", "protected_modules": ["stripe"],
                              "allowed_importers": ["agentsaga.connectors.check",
                                                    "agentsaga.connectors.stripe"]},
    "core-acyclic": {"type": "acyclic_siblings", "ancestors": ["agentsaga"], "depth": 1},
}


def _config() -> dict[str, Any]:
    config: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text())
    linter: dict[str, Any] = config["tool"]["importlinter"]
    return linter


def _contracts() -> dict[str, dict[str, Any]]:
    return {c["id"]: c for c in _config()["contracts"]}


def _core_parts() -> set[str]:
    """Every module and package right under agentsaga, the front ends' folders left out."""
    parts = {f"agentsaga.{p.stem}" for p in (ROOT / "agentsaga").iterdir()
             if (p.suffix == ".py" and p.stem != "__init__")
             or (p.is_dir() and (p / "__init__.py").exists())}
    return parts - FRONT_ENDS


def test_every_contract_is_kept() -> None:
    done = lint_imports.main([])
    assert done == 0


def test_no_contract_is_removed_or_loosened() -> None:
    contracts = _contracts()
    assert sorted(contracts) == sorted(EXPECTED)
    for name, expected in EXPECTED.items():
        contract = contracts[name]
        for field, value in expected.items():
            assert (sorted(contract[field]) if isinstance(value, list) else contract[field]) \
                == value, (name, field)
        assert "ignore_imports" not in contract, name
    assert set(_config()["root_packages"]) == {"agentsaga", "agentsaga_lab"}


def test_the_core_contract_names_every_part_of_the_core() -> None:
    """A new module or package under agentsaga/ is covered the day it lands."""
    assert set(_contracts()["core-without-front-ends"]["source_modules"]) == _core_parts()


PLANTED = {
    "core-without-front-ends": ("import agentsaga.sidecar.server\n", "agentsaga.client.planted"),
    "product-without-lab": ("import agentsaga_lab.world\n", "agentsaga.client.planted"),
    "only-store-psycopg": ("import psycopg\n", "agentsaga.client.planted"),
    "only-operator-kopf": ("import kubernetes\n", "agentsaga.client.planted"),
    "only-connector-stripe": ("import stripe\n", "agentsaga.client.planted"),
    # the adapters import the client: the client importing them closes a circle
    "core-acyclic": ("import agentsaga.adapters.listing\n", "- .client -> .adapters"),
}


@pytest.mark.parametrize("contract", sorted(PLANTED))
def test_each_contract_catches_a_planted_breach(tmp_path: Path, contract: str) -> None:
    """A module of the core that breaks the rule (in a copy of the layout, never the tree)."""
    lint_imports.installed_layout(tmp_path)
    client = tmp_path / "agentsaga" / "client"
    client.unlink()
    shutil.copytree(ROOT / "agentsaga" / "client", client,
                    ignore=shutil.ignore_patterns("__pycache__"))
    code, named = PLANTED[contract]
    (client / "planted.py").write_text(code)
    done = lint_imports.lint(tmp_path, ["--contract", contract], capture_output=True)
    assert done.returncode != 0, done.stdout
    assert named in done.stdout


def test_the_front_ends_are_in_the_graph(tmp_path: Path) -> None:
    """The sidecar importing the operator breaks a contract: both are really analysed."""
    lint_imports.installed_layout(tmp_path)
    sidecar = tmp_path / "agentsaga" / "sidecar"
    sidecar.unlink()
    shutil.copytree(ROOT / "sidecar", sidecar, ignore=shutil.ignore_patterns("__pycache__"))
    (sidecar / "planted.py").write_text("import agentsaga.operator.runs\n")
    done = lint_imports.lint(tmp_path, ["--contract", "front-ends-apart"], capture_output=True)
    assert done.returncode != 0, done.stdout
    assert "agentsaga.sidecar.planted" in done.stdout
