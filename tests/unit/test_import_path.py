"""Nothing puts the repository root on sys.path: its `operator/` folder (installed as
`agentsaga.operator`) must never shadow the standard library's `operator`. The tests import the
installed package, and their helpers as the package `sagatest` (tests/support)."""

from __future__ import annotations

import importlib.machinery
import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import agentsaga.operator
import sagatest

ROOT = Path(__file__).resolve().parents[2]
STDLIB = Path(sysconfig.get_paths()["stdlib"]).resolve()


def _on_path(entries: list[str], cwd: Path) -> set[Path]:
    return {(cwd / entry).resolve() if entry else cwd.resolve() for entry in entries}


def test_the_repository_root_is_not_on_sys_path() -> None:
    assert ROOT not in _on_path(sys.path, Path.cwd())
    assert (ROOT / "tests" / "support").resolve() in _on_path(sys.path, Path.cwd())


def test_operator_is_the_standard_librarys_and_the_helpers_come_from_tests_support() -> None:
    import operator

    assert Path(operator.__file__).resolve().parent == STDLIB
    assert operator.itemgetter(1)([0, 7]) == 7
    assert Path(agentsaga.operator.__file__).resolve() == ROOT / "operator" / "__init__.py"
    assert Path(sagatest.__file__).resolve().parent == ROOT / "tests" / "support" / "sagatest"
    # the test folders are not a package found on sys.path (pytest names their modules itself)
    assert importlib.machinery.PathFinder.find_spec("tests") is None


def test_processes_started_by_the_tests_do_not_get_the_root_either() -> None:
    code = ("import json, operator, sys, sagatest; print(json.dumps([sys.path, "
            "operator.__file__, sagatest.__file__]))")
    for argv in ([sys.executable, "-c", code], [sys.executable, "-m", "json.tool", "--help"]):
        done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=60,
                              env=os.environ.copy(), check=True)
        if argv[1] == "-c":
            path, operator_file, helpers = json.loads(done.stdout)
            assert ROOT not in _on_path(path, ROOT)
            assert Path(operator_file).resolve().parent == STDLIB
            assert Path(helpers).resolve().parent == ROOT / "tests" / "support" / "sagatest"
    assert os.environ["PYTHONSAFEPATH"] == "1"  # `python -m` from the root adds no root
