"""Agent frameworks on the sidecar, each a small optional extra over the same service:

    listing          the sidecar's tools as MCP `tools/list` gives them (schemas included), and
                     a call through the gRPC client worded for a model (shared by the adapters)
    openai_agents    the extra openai-agents: an Agent's MCP server for a run,
                     a lifecycle hook that begins and ends the run, function tools without MCP
    langgraph        the extra langgraph: LangChain tools for a ReAct agent or a
                     ToolNode, dispatched through the gRPC client

Pydantic AI connects to MCP servers natively: point its MCPToolset at the sidecar's URL with the
run header (docs/mcp.md).
"""
