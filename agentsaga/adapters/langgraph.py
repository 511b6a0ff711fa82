"""LangChain tools over the sidecar, for a LangGraph ReAct agent or a ToolNode
(the extra langgraph: `make frameworks` in the repository).

    tools = saga_tools(SagaClient("127.0.0.1:50051"), "refund-1182", listing)
    agent = create_react_agent(model, tools, prompt=SYSTEM_PROMPT)

Each tool has the schema the sidecar lists, dispatches through the gRPC client, and answers
with text a model understands (CONFIRMED: the result; otherwise the SYSTEM_PROMPT line that
says what to do); the outcome, step and key ride along as the ToolMessage's artifact.
"""

from __future__ import annotations

from typing import Any

from agentsaga.extras import require

require("langgraph", "langchain_core", "langgraph", "mcp_types", what="the LangGraph adapter")

import mcp_types as types  # noqa: E402
from langchain_core.tools import StructuredTool  # noqa: E402

from agentsaga.adapters.listing import call  # noqa: E402
from agentsaga.client import SagaClient  # noqa: E402

__all__ = ["saga_tools"]


def saga_tools(client: SagaClient, run_id: str, listing: list[types.Tool]) -> list[StructuredTool]:
    """LangChain tools from the sidecar's `tools/list`, dispatched for `run_id`."""

    def make(tool: types.Tool) -> StructuredTool:
        def invoke(**args: Any) -> tuple[str, dict[str, Any]]:
            answer = call(client, run_id, tool.name, args)
            return answer.text, {**answer.meta, "is_error": answer.is_error}

        return StructuredTool.from_function(
            func=invoke, name=tool.name, description=tool.description or tool.name,
            args_schema=dict(tool.input_schema), response_format="content_and_artifact")

    return [make(t) for t in listing]
