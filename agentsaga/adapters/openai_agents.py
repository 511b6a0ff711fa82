"""The OpenAI Agents SDK on the sidecar (the extra openai-agents: `make frameworks` in the
repository).

    server = sidecar_mcp_server("http://127.0.0.1:8765/mcp", run_id="refund-1182")
    hooks = SagaRunHooks(AsyncSagaClient("127.0.0.1:50051"), "refund-1182")
    agent = Agent(name="support", instructions=SYSTEM_PROMPT, mcp_servers=[server])
    async with server:
        await Runner.run(agent, "Refund order 1182", hooks=hooks)

Without MCP: `function_tools(client, run_id, await sidecar_tools(url))` gives FunctionTools that
dispatch through the gRPC client.
"""

from __future__ import annotations

import json
from typing import Any

import grpc

from agentsaga.extras import require

require("openai-agents", "agents", "mcp_types", what="the OpenAI Agents SDK adapter")

import mcp_types as types  # noqa: E402
from agents import Agent, FunctionTool, RunContextWrapper, RunHooks, Tool  # noqa: E402
from agents.mcp import MCPServerStreamableHttp  # noqa: E402

from agentsaga.adapters.listing import acall, run_headers  # noqa: E402
from agentsaga.client import AsyncSagaClient  # noqa: E402
from agentsaga.states import OPEN_RUN_STATES  # noqa: E402

__all__ = ["SagaRunHooks", "function_tools", "sidecar_mcp_server"]


def sidecar_mcp_server(url: str, run_id: str, *, agent: str = "", timeout_s: float = 60.0,
                       name: str = "agentsaga") -> MCPServerStreamableHttp:
    """The sidecar's MCP endpoint for one run: every request carries `Agentsaga-Run-Id`."""
    return MCPServerStreamableHttp(
        params={"url": url, "headers": run_headers(run_id, agent), "timeout": timeout_s},
        name=name, cache_tools_list=True, client_session_timeout_seconds=timeout_s)


class SagaRunHooks(RunHooks[Any]):
    """Begins (or adopts) the run when the first agent starts; ends it when an agent gives its
    final output: `Succeeded`, or what `outcome(output)` says (`Failed`, or None to leave the
    run open for an unwind), unless the model ended it already."""

    def __init__(self, client: AsyncSagaClient, run_id: str, *, agent: str = "",
                 outcome: Any = None) -> None:
        self.client = client
        self.run_id = run_id
        self.agent = agent
        self.outcome = outcome or (lambda output: "Succeeded")
        self.begun = False
        self.ended_as: str | None = None

    async def on_agent_start(self, context: Any, agent: Agent[Any]) -> None:
        if not self.begun:
            await self.client.begin_run(self.run_id, agent=self.agent or agent.name)
            self.begun = True

    async def on_agent_end(self, context: Any, agent: Agent[Any], output: Any) -> None:
        run = await self.client.get_run(self.run_id)
        if run.state not in OPEN_RUN_STATES:
            self.ended_as = run.state  # the model ended it (agentsaga_end_run)
            return
        outcome = self.outcome(output)
        if outcome is None:
            return
        try:
            self.ended_as = (await self.client.end_run(self.run_id, outcome)).state
        except grpc.RpcError as exc:  # e.g. a required pivot was never approved
            self.ended_as = f"not ended: {exc.details()}"


def function_tools(client: AsyncSagaClient, run_id: str,
                   listing: list[types.Tool]) -> list[Tool]:
    """FunctionTools for an Agent without MCP, from the sidecar's `tools/list`."""

    def make(tool: types.Tool) -> FunctionTool:
        async def invoke(ctx: RunContextWrapper[Any], input_json: str) -> str:
            args = json.loads(input_json) if input_json.strip() else {}
            return (await acall(client, run_id, tool.name, args)).text

        return FunctionTool(name=tool.name, description=tool.description or "",
                            params_json_schema=dict(tool.input_schema), on_invoke_tool=invoke,
                            strict_json_schema=False)

    return [make(t) for t in listing]


