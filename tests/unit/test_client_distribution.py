"""The agent side's distribution (client/: `agentsaga-client`) holds every module of agentsaga
its modules import, and imports no package but its declared dependencies (each adapter's
framework only through its extra): read from the sources, the modules client/setup.py keeps."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CLIENT = ROOT / "client"


def _setup_globals() -> dict[str, object]:
    """WHOLE and PARTS of client/setup.py, without running setup()."""
    tree = ast.parse((CLIENT / "setup.py").read_text())
    found: dict[str, object] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name) \
                and node.targets[0].id in ("WHOLE", "PARTS"):
            found[node.targets[0].id] = ast.literal_eval(node.value)
    return found


def _kept() -> dict[str, Path]:
    """module name -> source file, of every module the distribution holds."""
    setup = _setup_globals()
    whole: tuple[str, ...] = setup["WHOLE"]  # type: ignore[assignment]
    parts: dict[str, tuple[str, ...]] = setup["PARTS"]  # type: ignore[assignment]
    kept: dict[str, Path] = {}
    for package in whole:
        folder = ROOT.joinpath(*package.split("."))
        for path in folder.glob("*.py"):
            kept[package if path.stem == "__init__" else f"{package}.{path.stem}"] = path
    for package, modules in parts.items():
        folder = ROOT.joinpath(*package.split("."))
        for module in modules:
            kept[package if module == "__init__" else f"{package}.{module}"] = \
                folder / f"{module}.py"
    return kept


def _imports(path: Path) -> set[str]:
    """Every module `path` imports at run time (not those under `if TYPE_CHECKING:`)."""
    tree = ast.parse(path.read_text())
    typing_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
                   and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"
                   for child in node.body for n in ast.walk(child)}
    names: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
            names |= {f"{node.module}.{alias.name}" for alias in node.names}
    return names


def test_the_agent_side_holds_every_module_of_agentsaga_it_imports() -> None:
    kept = _kept()
    assert {"agentsaga", "agentsaga.client", "agentsaga.adapters.langgraph",
            "agentsaga.v1.sidecar_pb2_grpc"} <= kept.keys()
    assert not [m for m in kept if m.split(".")[:2][-1] in ("store", "cli", "service",
                                                            "sidecar", "operator")]
    missing = []
    for module, path in sorted(kept.items()):
        for name in _imports(path):
            if not name.startswith("agentsaga.") or name in kept:
                continue
            source = ROOT.joinpath(*name.split("."))
            if source.is_dir() or source.with_suffix(".py").is_file():
                missing.append(f"{module} imports {name}")  # a module the distribution lacks
            elif name.rsplit(".", 1)[0] not in kept:
                missing.append(f"{module} imports {name}")  # a name of a module it lacks
    assert missing == [], "add them to client/setup.py (or import them only when typing)"


SIDECAR_ONLY = {("agentsaga.telemetry.core", "opentelemetry-instrumentation-httpx")}
"""Imports of code the agent side never runs: the connectors' outbound HTTP spans (the
connectors run in the sidecar)."""


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_names(requirements: list[str]) -> set[str]:
    return {_canonical(re.split(r"[\[<>=!~ ;]", r, maxsplit=1)[0]) for r in requirements}


def _owners() -> dict[Path, str]:
    """Every installed file -> the distribution that installed it."""
    owners: dict[Path, str] = {}
    for dist in importlib.metadata.distributions():
        base = Path(str(dist.locate_file(""))).resolve()
        name = _canonical(dist.metadata["Name"])
        for file in dist.files or ():
            owners[base / str(file)] = name
    return owners


def _brought(allowed: set[str]) -> set[str]:
    """`allowed` and what each of them requires (their own dependencies come with them)."""
    found = set(allowed)
    for name in allowed:
        try:
            found |= _requirement_names([r for r in importlib.metadata.requires(name) or []
                                         if "extra ==" not in r])
        except importlib.metadata.PackageNotFoundError:
            continue
    return found


def _origin(name: str) -> Path | None:
    """The file of the module `name` names (`from a.b import c`: a.b.c, else a.b), found on
    sys.path without importing anything; None for a namespace package alone."""
    for candidate in (name, name.rsplit(".", 1)[0]):
        parts = candidate.split(".")
        for entry in sys.path:
            base = Path(entry or ".").joinpath(*parts)
            for path in (base / "__init__.py", base.with_suffix(".py"),
                         *base.parent.glob(f"{parts[-1]}.*.so")):
                if path.is_file():
                    return Path(entry or ".").resolve().joinpath(
                        path.relative_to(Path(entry or ".")))
    return None


def test_the_agent_side_imports_only_its_declared_dependencies() -> None:
    project = tomllib.loads((CLIENT / "pyproject.toml").read_text())["project"]
    core = _requirement_names(project["dependencies"])
    extras = {k: _requirement_names(v) for k, v in project["optional-dependencies"].items()}
    assert not {"psycopg", "kopf", "kubernetes", "mcp", "httpx", "jinja2"} & core
    by_module = {"agentsaga.adapters.openai_agents": extras["openai-agents"],
                 "agentsaga.adapters.langgraph": extras["langgraph"],
                 "agentsaga.adapters.listing": extras["openai-agents"] & extras["langgraph"],
                 "agentsaga.telemetry.core": extras["telemetry"],
                 "agentsaga.telemetry.masked_export": extras["telemetry"]}
    owners = _owners()
    wrong = []
    for module, path in sorted(_kept().items()):
        allowed = _brought(core | by_module.get(module, set()))
        for name in sorted(_imports(path)):
            top = name.split(".")[0]
            if top == "agentsaga" or top in sys.stdlib_module_names:
                continue
            origin = _origin(name)
            if origin is None:
                continue  # a namespace package alone (opentelemetry): its modules are named too
            owner = owners.get(origin, "?")
            if owner not in allowed and (module, owner) not in SIDECAR_ONLY:
                wrong.append(f"{module} imports {name} ({owner})")
    assert wrong == [], "declare them in client/pyproject.toml"
