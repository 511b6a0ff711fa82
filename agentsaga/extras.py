"""What ships and what helps: the core install runs a sidecar, the reconcile/unwind Jobs and the
client; an extra adds what one command or optional feature needs.

    pip install agentsaga              sidecar, reconcile/unwind Jobs, migrate, prune, the client
                                       (`from agentsaga import ...`), the HTTP, Jira, Zendesk,
                                       email and MCP connectors
    pip install 'agentsaga[operator]'  + kopf, the Kubernetes client and jsonpatch: `agentsaga
                                       operator` (the operator image)
    pip install 'agentsaga[stripe]'    + the Stripe SDK: agentsaga.connectors.stripe, the standard
                                       tool set's Stripe tools, `connectors check` of a Stripe
                                       account (the sidecar image)
    pip install 'agentsaga[embedded]'  + an embedded Postgres (pgserver) for a saga log without
                                       AGENTSAGA_DSN
    pip install 'agentsaga[openai-agents]'
                                       + the OpenAI Agents SDK: agentsaga.adapters.openai_agents
    pip install 'agentsaga[langgraph]' + LangGraph and LangChain: agentsaga.adapters.langgraph

Each image installs only the extras its process imports (images/*.requirements.lock): the
sidecar image `agentsaga[stripe]` (a sidecar and its Jobs never import kopf or the Kubernetes
client), the operator image `agentsaga[operator]` (no vendor SDK).

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
