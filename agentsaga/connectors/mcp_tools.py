"""The upstream MCP servers' tools as a tools module: `--tools agentsaga.connectors.mcp_tools`
registers every tool offered by the upstreams in AGENTSAGA_MCP_UPSTREAMS (the sidecar does this
itself for `--mcp-upstreams FILE`; the reconcile and unwind Jobs load it by this name)."""

from __future__ import annotations

import os
from collections.abc import Mapping

from agentsaga.connectors.mcp import declarations
from agentsaga.connectors.mcp.registration import register_upstreams
from agentsaga.errors import ConfigurationError
from agentsaga.registry import Registry

ENV = "AGENTSAGA_MCP_UPSTREAMS"


def from_env(registry: Registry, env: Mapping[str, str] = os.environ) -> Registry:
    path = env.get(ENV)
    if not path:
        raise ConfigurationError(f"{ENV} is not set: name the MCP upstreams file (YAML or JSON)")
    return register_upstreams(registry, declarations.load(path))[0]


registry = from_env(Registry())
