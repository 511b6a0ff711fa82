"""What ships and what helps: the core install runs a sidecar, the reconcile/unwind Jobs and the
client; an extra adds what one command or optional feature needs.

    agentsaga                 sidecar, reconcile/unwind Jobs, migrate, prune, the client
                              (`from agentsaga import ...`), the HTTP, Jira, Zendesk, email and
                              MCP connectors
    agentsaga[operator]       + kopf, the Kubernetes client and jsonpatch: `agentsaga operator`
                              (the operator image)
    agentsaga[stripe]         + the Stripe SDK: agentsaga.connectors.stripe, the standard tool
                              set's Stripe tools, `connectors check` of a Stripe account (the
                              sidecar image)
    agentsaga[embedded]       + an embedded Postgres (pgserver) for a saga log without
                              AGENTSAGA_DSN
    agentsaga[openai-agents]  + the OpenAI Agents SDK: agentsaga.adapters.openai_agents
    agentsaga[langgraph]      + LangGraph and LangChain: agentsaga.adapters.langgraph

No release is published on an index yet: everything installs from the repository, either its
own environment (`make demo`, `make test`; `.uv/bin/uv sync --inexact --extra EXTRA` adds an
extra, `make frameworks` the two frameworks) or the wheels `make dist` builds
(`pip install 'dist/agentsaga-0.1.0-py3-none-any.whl[operator]'`).

Each image installs only the extras its process imports (images/*.requirements.lock): the
sidecar image `agentsaga[stripe]` (a sidecar and its Jobs never import kopf or the Kubernetes
client), the operator image `agentsaga[operator]` (no vendor SDK). An agent's image installs the
agent side alone, `agentsaga-client` (client/ in the repository: the client and the adapters,
with the extras openai-agents and langgraph), no sidecar, operator or database driver.

The local world, the demo, the chaos runner and the benchmarks are the lab, a distribution of
its own (`agentsaga-lab`, lab/ in the repository) that adds its commands to `agentsaga`.

The sidecar's MCP endpoint and the upstream MCP servers' tools are core: the one sidecar image
serves MCP when the chart asks it to, and the Jobs call upstream lookups and compensations.

A module that needs an extra calls `require(...)` before importing it, so a missing one is a
`MissingExtra` that says what to install, not an ImportError from deep inside.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util

from agentsaga.errors import ConfigurationError

FRAMEWORKS = ("openai-agents", "langgraph")
"""The extras `make frameworks` installs into the repository's environment."""


def distribution() -> str:
    """The installed distribution that holds this package: `agentsaga` (the product) or
    `agentsaga-client` (the agent side, which holds the client and the adapters only)."""
    names = importlib.metadata.packages_distributions().get("agentsaga", [])
    return "agentsaga" if "agentsaga" in names or not names else names[0]


def how_to_install(extra: str, dist: str | None = None) -> str:
    """The commands that add `extra` from this repository (nothing is on an index yet): in the
    environment `make` creates (uv's, which has no pip), and from the wheels of `make dist`."""
    dist = dist or distribution()
    here = ("`make frameworks`" if extra in FRAMEWORKS and dist == "agentsaga"
            else f"`.uv/bin/uv sync --inexact --extra {extra}`" if dist == "agentsaga"
            else f"`.uv/bin/uv sync --inexact --package {dist} --extra {extra}`")
    return (f"{here} in the agentsaga repository (its .venv), or `pip install "
            f"'dist/{wheel(dist)}[{extra}]'` with the wheel `make dist` builds there (agentsaga "
            "is not on an index yet)")


def wheel(dist: str) -> str:
    """The file name of `dist`'s wheel as `make dist` builds it, of the installed version."""
    try:
        version = importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        version = "VERSION"
    return f"{dist.replace('-', '_')}-{version}-py3-none-any.whl"


class MissingExtra(ConfigurationError, ImportError):
    """An optional dependency is not installed; the message names the extra that brings it and
    how to install it from the repository."""

    def __init__(self, extra: str, module: str, what: str) -> None:
        dist = distribution()
        super().__init__(f"{what} needs {dist}[{extra}] ({module} is not installed): "
                         + how_to_install(extra, dist))
        self.extra = extra
        self.module = module


def require(extra: str, *modules: str, what: str) -> None:
    """Raise MissingExtra unless every one of `modules` can be imported."""
    for module in modules:
        if importlib.util.find_spec(module) is None:
            raise MissingExtra(extra, module, what)
