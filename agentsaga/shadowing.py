"""Shadowing: two modules of one name, and Python imports the other one.

Three cases bite a first tools module, each explained in words instead of a baffling import
error:

- `--tools email` while `./email.py` is yours: the standard library's `email` wins;
- `--tools ./stripe.py`: loading it would replace the installed `stripe` for everyone;
- a folder without `__init__.py` named like a package (a checkout called `agentsaga`) on the
  import path: Python makes a namespace package of it, and `from agentsaga import tool` fails
  with "(unknown location)".
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def explain_shadowing(name: str, *, file: Path | None = None) -> str | None:
    """Why importing `name` (or loading `file` as `name`) would not give the user's module;
    None when nothing is shadowed."""
    top = name.split(".")[0]
    found = _importable(top)
    if file is not None:
        if found is None or found[1] == file.resolve():
            return None
        return (f"its name {top!r} is the name of {_describe(top, *found)}; loading it would "
                f"replace that module for everything in this process. Rename the file (e.g. "
                f"{top}_tools.py)")
    mine = _in_cwd(top)
    if mine is None or found is None or found[1] == mine:
        return None
    return (f"your {mine} is shadowed by {_describe(top, *found)}, which Python imports first. "
            f"Rename yours, or pass it as a file: --tools ./{mine.name}")


def explain_namespace(package: str) -> str | None:
    """When `package` was imported as a namespace package (folders without `__init__.py`):
    which folders hide the real package."""
    module = sys.modules.get(package)
    if not isinstance(module, ModuleType) or getattr(module, "__file__", None):
        return None
    folders = [str(p) for p in getattr(module, "__path__", [])]
    if not folders:
        return None
    return (f"{package!r} was imported from the folder(s) {', '.join(folders)}, which have no "
            f"__init__.py: a folder named {package!r} on the import path (the current directory "
            f"or PYTHONPATH; a checkout of the project is one) hides the installed package. Run "
            f"from another directory or rename the folder")


def _importable(top: str) -> tuple[str, Path] | None:
    """(kind, location) of what `import top` gives: already imported, or found on the path."""
    module = sys.modules.get(top)
    origin: str | None = getattr(module, "__file__", None) if module is not None else None
    if module is None:
        try:
            spec = importlib.util.find_spec(top)
        except (ImportError, ValueError):
            spec = None
        origin = spec.origin if spec is not None and spec.has_location else None
    if origin is None:
        return None
    path = Path(origin).resolve()
    location = path.parent if path.name == "__init__.py" else path
    stdlib = Path(sys.base_prefix).resolve()
    kind = ("the standard library's" if stdlib in path.parents and "site-packages" not in
            path.parts else "the installed module")
    return kind, location


def _describe(top: str, kind: str, location: Path) -> str:
    return f"{kind} {top!r} ({location})"


def _in_cwd(top: str) -> Path | None:
    cwd = Path.cwd()
    for candidate in (cwd / f"{top}.py", cwd / top):
        if candidate.exists():
            return candidate.resolve()
    return None
