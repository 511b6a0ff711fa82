"""The shape of the code: no import cycle in `agentsaga`, every SQL statement in the store, the
store the only user of psycopg (but to open pools)."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# the installed package's folders (setup.py maps sidecar/ and operator/ into agentsaga)
PACKAGES = {"agentsaga": ROOT / "agentsaga", "agentsaga.sidecar": ROOT / "sidecar",
            "agentsaga.operator": ROOT / "operator"}
GENERATED = ("agentsaga.v1",)
SQL = re.compile(r"\b(SELECT\b[\s\S]+\bFROM|INSERT\s+INTO|UPDATE\s+\w+\s+SET|DELETE\s+FROM)\b")


def modules() -> Iterator[tuple[str, Path]]:
    for package, folder in PACKAGES.items():
        for path in sorted(folder.rglob("*.py")):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            name = ".".join([package, *parts])
            if not name.startswith(GENERATED):
                yield name, path


def _type_checking_only(node: ast.AST) -> bool:
    return (isinstance(node, ast.If) and isinstance(node.test, ast.Name)
            and node.test.id == "TYPE_CHECKING")


def imports(tree: ast.Module, known: set[str]) -> set[str]:
    """The agentsaga modules a module imports when it runs (anywhere in it, functions too;
    not the `if TYPE_CHECKING:` blocks)."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if _type_checking_only(node):
            return
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name in known)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                if sub in known:
                    found.add(sub)
                elif node.module in known:
                    found.add(node.module)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def import_graph() -> dict[str, set[str]]:
    paths = dict(modules())
    known = set(paths)
    return {name: imports(ast.parse(path.read_text()), known) - {name}
            for name, path in paths.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return found


def test_the_import_graph_of_agentsaga_has_no_cycle() -> None:
    graph = import_graph()
    assert "agentsaga.store.saga_log" in graph and "agentsaga.telemetry.spans" in graph
    assert cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def _in_store(name: str) -> bool:
    return name == "agentsaga.store" or name.startswith(("agentsaga.store.",
                                                         "agentsaga.migrations"))


def sql_strings(path: Path) -> list[str]:
    return [node.value for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and SQL.search(node.value)]


def test_sql_statements_live_only_in_the_store() -> None:
    outside = {name: found for name, path in modules()
               if not _in_store(name) and (found := sql_strings(path))}
    assert outside == {}


def test_the_sql_finder_finds_statements() -> None:
    found = [bool(SQL.search(text)) for text in (
        "SELECT status, count(*) FROM saga_log", "INSERT INTO corrections (run_id)",
        "UPDATE saga_runs SET state = %s", "DELETE FROM ledger", "DELETE /drafts/{id}",
        "select the tool", "POST/GET/DELETE {url}/_world/faults")]
    assert found == [True, True, True, True, False, False, False]


def test_only_the_store_imports_psycopg() -> None:
    """Beyond the store, nothing imports psycopg (the benchmark's DBOS peer runs in its own
    environment and only parses a DSN for DBOS)."""
    allowed = ("agentsaga_lab.bench.peers.",)
    users = sorted(name for name, path in modules()
                   if not _in_store(name) and not name.startswith(allowed)
                   and re.search(r"^\s*(import psycopg|from psycopg)", path.read_text(), re.M))
    assert users == []
