"""The sidecar's MCP endpoint: a second thin front end (Streamable HTTP at `/mcp`) over the same
`agentsaga.service.saga_service.SagaService` as gRPC (its validation, run locks, rate limiter and
epochs).

    handlers   the MCP server: tools/list, tools/call, the run of a request
    outcomes   a dispatch outcome, or a refusal by its error code, as an MCP tool result
    serving    Streamable HTTP on a loopback port, in a thread next to the gRPC server
"""
