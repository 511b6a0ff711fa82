"""Upstream MCP servers as tool sources: their tools registered into the same `Registry` as
Python tools, each with its saga declaration written in data, so that dispatch, reconcile and
unwind treat them exactly like Python tools.

    declarations   the upstreams file (`--mcp-upstreams FILE`, AGENTSAGA_MCP_UPSTREAMS), checked
    templates      arguments from `{placeholders}` or sandboxed Jinja2; results read by JMESPath
    upstream       one connection per upstream (Streamable HTTP or stdio), used from any thread
    registration   upstream tools -> ToolSpecs (class, key, lookup, compensation); hidden ones
    check          `agentsaga mcp check --upstreams FILE`
"""

TOOLS_MODULE = "agentsaga.connectors.mcp_tools"
"""The tools module that registers the upstreams file's tools (`--tools`, as the Jobs load them)."""
