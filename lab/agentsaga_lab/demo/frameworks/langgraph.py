"""The run with LangGraph: a prebuilt ReAct agent whose tools are the sidecar's tools as
LangChain tools (dispatched through the gRPC client), and a scripted chat model (no network)."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langgraph.prebuilt import create_react_agent

from agentsaga.adapters.langgraph import saga_tools
from agentsaga.adapters.listing import sidecar_tools
from agentsaga.client import SYSTEM_PROMPT, SagaClient
from agentsaga_lab.demo.frameworks.script import DONE, EssayModel
from agentsaga_lab.demo.model import Call

RECURSION_LIMIT = 40


class ScriptedChatModel(BaseChatModel):
    """A chat model whose every turn is the essay model's decision on the last tool message."""

    essay: EssayModel
    pending: list[Call] = []

    model_config = {"arbitrary_types_allowed": True}

    @property
    def _llm_type(self) -> str:
        return "agentsaga-scripted"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedChatModel:
        return self

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None,
                  **kwargs: Any) -> ChatResult:
        if self.pending and isinstance(messages[-1], ToolMessage):
            self.essay.observe(self.pending.pop(), str(messages[-1].content))
        move = self.essay.decide()
        if isinstance(move, str):
            message = AIMessage(content=move)
        else:
            self.pending.append(move)
            message = AIMessage(content="", tool_calls=[
                {"name": move.tool, "args": move.args, "id": f"call-{next(_ids)}"}])
        return ChatResult(generations=[ChatGeneration(message=message)])


_ids = itertools.count(1)


def run(grpc_address: str, mcp_url: str, run_id: str) -> tuple[EssayModel, str]:
    listing = asyncio.run(sidecar_tools(mcp_url))
    essay = EssayModel()
    with SagaClient(grpc_address, timeout=60) as client:
        client.begin_run(run_id, agent="support-agent")
        agent = create_react_agent(ScriptedChatModel(essay=essay, pending=[]),
                                   saga_tools(client, run_id, listing), prompt=SYSTEM_PROMPT)
        state = agent.invoke({"messages": [HumanMessage("Refund order 1182 and reship it.")]},
                             {"recursion_limit": RECURSION_LIMIT})
        final = str(state["messages"][-1].content)
        if final == DONE:
            client.end_run(run_id, "Succeeded")
    return essay, final
