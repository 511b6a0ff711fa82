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
afresh and maps them to the functions they reach again.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MUTMUT = Path(sys.executable).parent / "mutmut"
TEMPLATE = "agentsaga_mutate_template"
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
    from agentsaga.postgres import embedded_dsn

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
