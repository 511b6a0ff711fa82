"""`make mutate`: the mutation score of the core (mutmut; not in CI, it is slow).

mutmut mutates the modules `[tool.mutmut] only_mutate` names (pyproject.toml) and runs, for each
mutant, the fast tests of `pytest_add_cli_args_test_selection` that reach the mutated function.
Every test session it starts shares one embedded Postgres, started here (AGENTSAGA_TEST_DSN), and
one migrated template database on it (AGENTSAGA_TEST_TEMPLATE), so that a mutant costs its tests
and not a server start or a migration. Prints the score and the surviving
mutants; `mutmut show <name>` shows one.

    tools/mutate.py [MUTANT_GLOB ...]    e.g. 'agentsaga.keys*' to re-run a module's mutants
    tools/mutate.py --resume             only the mutants not checked yet

Without names it first checks again, by name, every mutant not killed (and those killed only by
the time limit): mutmut keeps a verdict while the mutated function is unchanged, even when the
tests changed since. Then it runs every mutant not checked yet. Every run copies the tests
afresh and maps them to the functions they reach again, the crash tests (which reach the
functions with a crash point in a child process, unseen by mutmut) included.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MUTMUT = Path(sys.executable).parent / "mutmut"
TEMPLATE = "agentsaga_mutate_template"
MAPPING_RUN = "agentsaga.keys.x_step_key__mutmut_1"
"""The mutant `map_tests` runs (its tests: the golden keys, a second)."""
KILLED = {"killed", "timeout"}
"""A mutant that makes the tests hang is caught (by mutmut's time limit)."""


def results() -> dict[str, str]:
    """Every mutant mutmut ran, by name: killed, survived, timeout, no tests, ..."""
    out = subprocess.run([str(MUTMUT), "results", "--all", "true"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    found = {}
    for line in out.splitlines():
        name, sep, status = line.strip().rpartition(": ")
        if sep:
            found[name] = status
    return found


def main(argv: list[str]) -> int:
    from agentsaga.store.postgres import embedded_dsn

    sys.path.insert(0, str(ROOT / "tests" / "support"))
    from sagatest.pg_fixtures import create_template, in_memory, without_flushing

    resume = argv[:1] == ["--resume"]
    argv = argv[1:] if resume else argv
    with tempfile.TemporaryDirectory(prefix="agentsaga-mutate-", dir=in_memory()) as tmp:
        dsn = embedded_dsn(Path(tmp) / "pg")
        without_flushing(dsn)
        create_template(dsn, TEMPLATE)
        env = {**os.environ, "AGENTSAGA_TEST_DSN": dsn, "AGENTSAGA_TEST_TEMPLATE": TEMPLATE}
        forget_tests()  # the tests as they are now, not as at the first run
        map_tests(env)
        if argv:
            subprocess.run([str(MUTMUT), "run", *argv], cwd=ROOT, env=env, check=False)
        else:
            # mutmut keeps a verdict while the mutated function is unchanged, even when the
            # tests changed since: every mutant not killed is checked again first, by name,
            # against the tests as they are now; then every mutant not checked yet
            again = [] if resume else sorted(
                name for name, status in results().items()
                if status not in KILLED - {"timeout"} | {"not checked"})
            if again:
                subprocess.run([str(MUTMUT), "run", *again], cwd=ROOT, env=env, check=False)
                forget_tests()  # tests written meanwhile, for the survivors
                map_tests(env)
            subprocess.run([str(MUTMUT), "run"], cwd=ROOT, env=env, check=False)
    found = results()
    counts = Counter(found.values())
    checked = sum(n for status, n in counts.items() if status != "not checked")
    killed = sum(counts[status] for status in KILLED)
    survivors = sorted(name for name, status in found.items()
                       if status not in KILLED | {"not checked"})
    print("\nsurviving mutants (`.venv/bin/mutmut show NAME`):")
    for name in survivors:
        print(f"  {name}: {found[name]}")
    print("\nby module (killed of checked; not checked):")
    for module, statuses in sorted(by_module(found).items()):
        print(f"  {module}: " + line(statuses))
    print("\n" + ", ".join(f"{status} {n}" for status, n in sorted(counts.items())))
    score = 100.0 * killed / checked if checked else 0.0
    print(f"mutation score: {killed} of {checked} mutants killed ({score:.1f}%)")
    return 0


def forget_tests() -> None:
    """Make mutmut copy the tests again and map them to the functions they reach: it keeps the
    copy it made at its first run, and a map of the tests as they were then."""
    shutil.rmtree(ROOT / "mutants" / "tests", ignore_errors=True)
    (ROOT / "mutants" / "mutmut-stats.json").unlink(missing_ok=True)


def map_tests(env: dict[str, str]) -> None:
    """Make mutmut's map of the tests to the functions they reach, then add the crash tests to
    the functions they kill a child in (`crash_tests`): mutmut sees only what runs in the
    test's own process. mutmut makes its map (and its mutants) at the start of a run, and has
    no command for that alone: a run of one mutant whose tests take a second makes it."""
    subprocess.run([str(MUTMUT), "run", MAPPING_RUN], cwd=ROOT, env=env,
                   capture_output=True, text=True, check=True)
    path = ROOT / "mutants" / "mutmut-stats.json"
    stats = json.loads(path.read_text())
    tests = crash_tests(list(stats["duration_by_test"]))
    functions = crash_point_functions()
    mapped = stats["tests_by_mangled_function_name"]
    for function in functions:
        mapped[function] = sorted(set(mapped.get(function, [])) | set(tests))
    path.write_text(json.dumps(stats, indent=4))
    print(f"{len(tests)} crash tests added to the functions with a crash point: "
          + ", ".join(functions))


def crash_tests(test_ids: list[str]) -> list[str]:
    """The tests that arm a crash point (`AGENTSAGA_CRASH_AT`): each runs the package in a
    child process and kills it there, and so kills a mutant of the crash point's name."""
    armed: set[str] = set()
    for file in {test_id.split("::")[0] for test_id in test_ids}:
        tree = ast.parse((ROOT / file).read_text())
        armed |= {f"{file}::{node.name}" for node in ast.walk(tree)
                  if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")
                  and "AGENTSAGA_CRASH_AT" in ast.unparse(node)}
    return [test_id for test_id in test_ids if test_id.split("[")[0] in armed]


def crash_point_functions() -> list[str]:
    """The mutated functions that reach a crash point (`crashpoints.reach`), named as mutmut
    names them (`module.x_function`, `module.xǁClassǁmethod`)."""
    found = []
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mutmut"][
        "only_mutate"]
    for path in sorted({path for pattern in patterns for path in ROOT.glob(pattern)}):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        tree = ast.parse(path.read_text())
        for parent in [tree, *(n for n in tree.body if isinstance(n, ast.ClassDef))]:
            for node in parent.body:
                if (isinstance(node, ast.FunctionDef)
                        and "crashpoints.reach(" in ast.unparse(node)):
                    name = (f"xǁ{parent.name}ǁ{node.name}" if isinstance(parent, ast.ClassDef)
                            else f"x_{node.name}")
                    found.append(f"{module}.{name}")
    return found


def by_module(found: dict[str, str]) -> dict[str, Counter[str]]:
    """Each mutated module's mutants by status (a mutant's name is `module.x...__mutmut_N`)."""
    out: dict[str, Counter[str]] = {}
    for name, status in found.items():
        module = name.split(".x", 1)[0]
        out.setdefault(module, Counter())[status] += 1
    return out


def line(statuses: Counter[str]) -> str:
    checked = sum(n for status, n in statuses.items() if status != "not checked")
    killed = sum(statuses[status] for status in KILLED)
    score = f" ({100.0 * killed / checked:.1f}%)" if checked else ""
    return f"{killed} of {checked}{score}; not checked {statuses['not checked']}"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
