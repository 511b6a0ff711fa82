"""The run with the OpenAI Agents SDK: an Agent whose only tools are the sidecar's MCP endpoint
for this run, the run begun and ended by `SagaRunHooks`, and a scripted model (no network)."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

from agents import Agent, Runner, set_tracing_disabled
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call
from agents.testing.model import ModelCall

from agentsaga.adapters.openai_agents import SagaRunHooks, sidecar_mcp_server
from agentsaga.client import SYSTEM_PROMPT, AsyncSagaClient
from agentsaga_lab.demo.frameworks.script import GAVE_UP, EssayModel
from agentsaga_lab.demo.model import Call

MAX_TURNS = 20


def _output_text(item: Any) -> str:
    output = item.get("output") if isinstance(item, dict) else getattr(item, "output", "")
    if isinstance(output, str):
        return output
    if isinstance(output, dict):
        return str(output.get("text", ""))
    return "".join(str(part.get("text", "")) for part in output or [] if isinstance(part, dict))


def scripted_model(essay: EssayModel) -> ScriptedModel:
    ids = itertools.count(1)
    pending: list[Call] = []

    def respond(call: ModelCall) -> Any:
        items = call.input if isinstance(call.input, list) else []
        outputs = [i for i in items if (i.get("type") if isinstance(i, dict) else None)
                   == "function_call_output"]
        if pending and outputs:
            essay.observe(pending.pop(), _output_text(outputs[-1]))
        move = essay.decide()
        if isinstance(move, str):
            return [assistant_message(move)]
        pending.append(move)
        return [function_call(move.tool, move.args, call_id=f"call-{next(ids)}")]

    return ScriptedModel([ModelStep.respond(respond) for _ in range(MAX_TURNS)])


async def run_agent(grpc_address: str, mcp_url: str, run_id: str) -> tuple[EssayModel, str]:
    set_tracing_disabled(True)
    essay = EssayModel()
    server = sidecar_mcp_server(mcp_url, run_id, agent="support-agent")
    client = AsyncSagaClient(grpc_address, timeout=60)
    hooks = SagaRunHooks(client, run_id, outcome=lambda out: None if out == GAVE_UP
                         else "Succeeded")
    agent = Agent(name="support-agent", instructions=SYSTEM_PROMPT,
                  model=scripted_model(essay), mcp_servers=[server])
    try:
        async with server:
            result = await Runner.run(agent, "Refund order 1182 and reship it.", hooks=hooks,
                                      max_turns=MAX_TURNS)
    finally:
        await client.close()
    return essay, str(result.final_output)


def run(grpc_address: str, mcp_url: str, run_id: str) -> tuple[EssayModel, str]:
    return asyncio.run(run_agent(grpc_address, mcp_url, run_id))
