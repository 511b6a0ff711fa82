"""What ships and what helps: the core install runs a sidecar, the operator and the Jobs; an
extra adds what one optional feature needs.

    pip install agentsaga              sidecar, operator, reconcile/unwind Jobs, the client
    pip install 'agentsaga[embedded]'  + an embedded Postgres (pgserver) for a saga log without
                                       AGENTSAGA_DSN
    pip install 'agentsaga[openai-agents]'
                                       + the OpenAI Agents SDK: agentsaga.adapters.openai_agents
    pip install 'agentsaga[langgraph]' + LangGraph and LangChain: agentsaga.adapters.langgraph

The local world, the demo, the chaos runner and the benchmarks are the lab, a distribution of
its own (`agentsaga-lab`, lab/ in the repository) that adds its commands to `agentsaga`.

The sidecar's MCP endpoint and the upstream MCP servers' tools are core: the one sidecar image
serves MCP when the chart asks it to, and the Jobs call upstream lookups and compensations.

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
