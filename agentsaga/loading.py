"""Loading the user's tools: `--tools mypkg.tools`, `--tools mytools` (a module in the current
directory) or `--tools ./mytools.py` (a file) imports modules that register tools.

What goes wrong on a first try is said in one line: a module that is not there, a module
shadowed by another one of the same name (`agentsaga.shadowing`), a broken module
(`file:line: error`, not a traceback), a module that registers nothing.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType

from agentsaga.errors import ConfigurationError
from agentsaga.saga.registry import Registry, default_registry
from agentsaga.shadowing import explain_namespace, explain_shadowing

_PACKAGE_DIR = Path(__file__).resolve().parent
CONNECTORS = "agentsaga.connectors.tools"
NO_TOOLS_HINT = ("pass --tools MODULE (or set AGENTSAGA_TOOLS): a module name such as "
                 "agentsaga.connectors.tools or mytools (found in the current directory), or a "
                 "file such as ./mytools.py")


def load_tools(modules: Sequence[str]) -> Registry:
    """Import each module; a module's own `registry` (a Registry) is used if it has one, else
    the tools it registered with `agentsaga.tool` in the default registry."""
    if not modules:
        raise ConfigurationError(f"no tools configured: {NO_TOOLS_HINT}")
    merged = Registry()
    for name in modules:
        module = import_tools_module(name)
        own = getattr(module, "registry", None)
        source = own if isinstance(own, Registry) else default_registry
        merged.merge(source)
    if not len(merged):
        raise ConfigurationError(
            f"the tools modules {', '.join(modules)} registered no tools"
            f"{_submodule_hint(modules) or '; ' + NO_TOOLS_HINT}")
    return merged


def import_tools_module(name: str) -> ModuleType:
    """One tools module, by dotted name or by file path (`./mytools.py`, `/srv/tools.py`)."""
    if name.endswith(".py") or "/" in name:
        return _import_file(name)
    _put_cwd_on_path()
    shadow = explain_shadowing(name)
    if shadow:
        raise ConfigurationError(f"cannot use tools module {name!r}: {shadow}")
    return _guarded(name, lambda: importlib.import_module(name), missing=name)


def _import_file(given: str) -> ModuleType:
    path = Path(given)
    if not path.is_file():
        raise ConfigurationError(f"tools file {given!r} does not exist (looked in {Path.cwd()})")
    path = path.resolve()
    module_name = path.stem
    loaded = sys.modules.get(module_name)
    if loaded is not None and getattr(loaded, "__file__", None) == str(path):
        return loaded
    shadow = explain_shadowing(module_name, file=path)
    if shadow:
        raise ConfigurationError(f"cannot use tools file {str(path)!r}: {shadow}")
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ConfigurationError(f"tools file {str(path)!r} is not a Python module")
    module = importlib.util.module_from_spec(spec)
    # its own folder is importable, so that it can import its neighbours
    if str(path.parent) not in sys.path:
        sys.path.append(str(path.parent))
    sys.modules[module_name] = module
    loader = spec.loader

    def execute() -> ModuleType:
        loader.exec_module(module)
        return module

    try:
        return _guarded(str(path), execute)
    except BaseException:
        sys.modules.pop(module_name, None)
        raise


def _guarded(what: str, load: Callable[[], ModuleType], *, missing: str = "") -> ModuleType:
    """Run `load()`; an error raised by the module's own code becomes `file:line: error`.
    `missing`: the dotted name being imported, whose own absence is said as such."""
    try:
        return load()
    except ModuleNotFoundError as exc:
        if missing and exc.name is not None and (missing + ".").startswith(exc.name + "."):
            raise ConfigurationError(
                f"cannot import tools module {missing!r}: no module named {exc.name!r} in the "
                f"current directory ({Path.cwd()}) or on the import path; pass a file path "
                "(--tools ./mytools.py) or the module's dotted name") from None
        raise ConfigurationError(_broken(what, exc)) from None
    except SyntaxError as exc:
        where = f"{exc.filename}:{exc.lineno}" if exc.filename else what
        raise ConfigurationError(
            f"{where}: SyntaxError: {exc.msg} (in tools module {what!r})") from None
    except Exception as exc:
        raise ConfigurationError(_broken(what, exc)) from None


def _broken(what: str, exc: BaseException) -> str:
    """`file:line: Type: message` at the deepest frame of the user's code."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if _is_users(f.filename)]
    where = f"{frames[-1].filename}:{frames[-1].lineno}" if frames else what
    message = f"{where}: {type(exc).__name__}: {exc} (in tools module {what!r})"
    hidden = (explain_namespace(exc.name.split(".")[0])
              if isinstance(exc, ImportError) and exc.name else None)
    return f"{message}. {hidden}" if hidden else message


def _is_users(filename: str) -> bool:
    if filename.startswith("<"):
        return False
    path = Path(filename).resolve()
    return _PACKAGE_DIR not in path.parents and "importlib" not in path.parts


def _put_cwd_on_path() -> None:
    """A module in the current directory is found (after everything installed: the current
    directory never shadows an installed module; `explain_shadowing` says when that bites)."""
    cwd = str(Path.cwd())
    if cwd not in sys.path and "" not in sys.path:
        sys.path.append(cwd)


def _submodule_hint(modules: Sequence[str]) -> str:
    """`agentsaga.connectors` registers nothing; `agentsaga.connectors.tools` does, once a
    connector is configured."""
    if CONNECTORS in modules:
        return (f" ({CONNECTORS} registers a connector's tools only when it is configured: set "
                "AGENTSAGA_STRIPE_API_KEY(_FILE), AGENTSAGA_JIRA_URL, AGENTSAGA_ZENDESK_URL, "
                "AGENTSAGA_EMAIL_URL, AGENTSAGA_WAREHOUSE_URL or AGENTSAGA_HTTP_TOOLS)")
    hints = []
    for name in modules:
        try:
            found = importlib.util.find_spec(f"{name}.tools")
        except (ImportError, ValueError):
            found = None
        if found is not None:
            hints.append(f"{name}.tools")
    return f" (did you mean {', '.join(hints)}?)" if hints else ""
