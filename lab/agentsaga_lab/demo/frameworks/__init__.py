"""`agentsaga demo --agent openai-agents|langgraph`: the essay's refund-and-reship run told
through a real agent framework, with a scripted model (no network) that behaves like the
essay's, its tools served by an MCP server over the world's systems, through the sidecar's MCP
endpoint (OpenAI Agents SDK) or its gRPC client (LangGraph).

    script        the scripted model's decisions (framework-neutral)
    stage         the world, its MCP server, the sidecar; the unwind and the ground truth
    openai        the run with the OpenAI Agents SDK
    langgraph     the run with a LangGraph ReAct agent
"""
