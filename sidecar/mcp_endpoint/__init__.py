"""The sidecar's MCP endpoint: a second thin front end (Streamable HTTP at `/mcp`) over the same
saga service as gRPC.

    port       the service methods the endpoint needs (a Protocol) and the values they return
    service    the one module that satisfies the port over today's Dispatcher
    outcomes   a dispatch outcome as an MCP tool result a model understands
    handlers   the MCP server: tools/list, tools/call, the run of a session
    serving    Streamable HTTP on a loopback port, in a thread next to the gRPC server
"""
