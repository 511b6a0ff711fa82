"""Loading the user's tools: `--tools mypkg.tools` imports modules that register tools."""

from __future__ import annotations

import importlib
from collections.abc import Sequence

from agentsaga.errors import ConfigurationError
from agentsaga.registry import Registry, default_registry


def load_tools(modules: Sequence[str]) -> Registry:
    """Import each module; a module's own `registry` (a Registry) is used if it has one, else
    the tools it registered with `agentsaga.tool` in the default registry."""
    if not modules:
        raise ConfigurationError(
            "no tools configured: pass --tools MODULE (or set AGENTSAGA_TOOLS), e.g. "
            "--tools agentsaga.connectors.tools"
        )
    merged = Registry()
    for name in modules:
        try:
            module = importlib.import_module(name)
        except ImportError as exc:
            raise ConfigurationError(f"cannot import tools module {name!r}: {exc}") from exc
        own = getattr(module, "registry", None)
        source = own if isinstance(own, Registry) else default_registry
        merged.merge(source)
    if not len(merged):
        raise ConfigurationError(f"the tools modules {', '.join(modules)} registered no tools")
    return merged
