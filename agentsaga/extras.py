"""What ships and what helps: the core install runs a sidecar, the operator and the Jobs; the
local world, the embedded Postgres, the demo, the chaos runner and the benchmarks need an extra.

    pip install agentsaga              sidecar, operator, reconcile/unwind Jobs, the client
    pip install 'agentsaga[demo]'      + the local world (aiohttp, aiosmtpd), embedded Postgres
                                       (pgserver): `agentsaga world`, `demo`, `chaos`
    pip install 'agentsaga[bench]'     + what `agentsaga bench` needs (includes demo)

A module that needs an extra calls `require(...)` before importing it, so a missing one is a
`MissingExtra` that says what to install, not an ImportError from deep inside.
"""

from __future__ import annotations

import importlib.util

from agentsaga.errors import ConfigurationError


class MissingExtra(ConfigurationError, ImportError):
    """An optional dependency is not installed; the message names the extra that brings it."""

    def __init__(self, extra: str, module: str, what: str) -> None:
        super().__init__(f"{what} needs `pip install 'agentsaga[{extra}]'` ({module} is not "
                         "installed)")
        self.extra = extra
        self.module = module


def require(extra: str, *modules: str, what: str) -> None:
    """Raise MissingExtra unless every one of `modules` can be imported."""
    for module in modules:
        if importlib.util.find_spec(module) is None:
            raise MissingExtra(extra, module, what)
