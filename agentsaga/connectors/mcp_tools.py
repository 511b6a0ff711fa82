"""The upstream MCP servers' tools as a tools module: `--tools agentsaga.connectors.mcp_tools`
registers every tool offered by the upstreams in AGENTSAGA_MCP_UPSTREAMS (the sidecar does this
itself for `--mcp-upstreams FILE`; the reconcile and unwind Jobs load it by this name)."""

from __future__ import annotations

from agentsaga.connectors.mcp import declarations
from agentsaga.connectors.mcp.registration import register_upstreams
from agentsaga.errors import ConfigurationError
from agentsaga.saga.registry import Registry
from agentsaga.settings import McpSettings, Settings


def from_settings(registry: Registry, settings: McpSettings) -> Registry:
    if not settings.upstreams:
        raise ConfigurationError("AGENTSAGA_MCP_UPSTREAMS is not set: name the MCP upstreams "
                                 "file (YAML or JSON)")
    return register_upstreams(registry, declarations.load(settings.upstreams))[0]


registry = from_settings(Registry(), Settings.from_env().mcp)
