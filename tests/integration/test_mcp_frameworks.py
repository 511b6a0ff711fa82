"""Real frameworks on the sidecar, with scripted models (no network): the OpenAI Agents SDK and
LangGraph demos give the plain demo's ground truth; the LangChain tools in a ToolNode, the
Agents SDK's function tools without MCP, and the README's Pydantic AI example."""

from __future__ import annotations

import asyncio

from langchain_core.messages import AIMessage, ToolMessage
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode

from agentsaga.adapters.langgraph import saga_tools
from agentsaga.adapters.listing import run_headers, sidecar_tools
from agentsaga_lab.demo.frameworks.runner import run_framework
from agentsaga_lab.demo.frameworks.script import GAVE_UP
from agentsaga_lab.demo.report import EXPECTED_AGENTSAGA
from agentsaga_lab.world import Fault, World
from sagatest.mcp_fixtures import MCPSidecar, run

TICKET = {"summary": "Refund for order 1182", "order_id": "1182"}
ESSAY = [("search_orders", "CONFIRMED"), ("create_ticket", "OUTCOME UNKNOWN"),
         ("charge_card", "STEP UNRESOLVED"), ("create_ticket", "CONFIRMED"),
         ("charge_card", "OUTCOME UNKNOWN"), ("reship", "STEP UNRESOLVED"),
         ("charge_card", "CONFIRMED"), ("reship", "FAILED")]


def test_openai_agents_demo_produces_the_plain_demos_ground_truth(pg: str) -> None:
    result = run_framework("openai-agents", pg)
    assert [(c["tool"], c["saw"]) for c in result.calls] == ESSAY
    assert result.calls[3]["args"]["summary"] == "Order #1182 refund"  # reworded retry
    assert result.final == GAVE_UP
    assert result.outcome == EXPECTED_AGENTSAGA


def test_langgraph_demo_produces_the_plain_demos_ground_truth(pg: str) -> None:
    result = run_framework("langgraph", pg)
    assert [(c["tool"], c["saw"]) for c in result.calls] == ESSAY
    assert result.outcome == EXPECTED_AGENTSAGA


def test_langchain_tools_in_a_tool_node_dispatch_and_say_outcome_unknown(
        mcp_sidecar: MCPSidecar, world: World) -> None:
    world.faults.add(Fault("POST", "/rest/api/3/issue", "commit_then_504", on_call=1))
    listing = run(sidecar_tools(mcp_sidecar.url))
    with mcp_sidecar.grpc() as client:
        client.begin_run("run-toolnode")
        tools = {t.name: t for t in saga_tools(client, "run-toolnode", listing)}
        assert tools["create_ticket"].args["summary"]["type"] == "string"  # the schema
        graph = StateGraph(MessagesState)
        graph.add_node("tools", ToolNode(list(tools.values())))
        graph.add_edge(START, "tools")
        node = graph.compile()
        calls = [AIMessage(content="", tool_calls=[
            {"name": "create_ticket", "args": args, "id": f"c{n}"}]) for n, args in
            enumerate([TICKET, {**TICKET, "summary": "Order #1182 refund"}])]
        answers: list[ToolMessage] = [node.invoke({"messages": [m]})["messages"][-1]
                                      for m in calls]
    assert str(answers[0].content).startswith("OUTCOME UNKNOWN: the call may or may not")
    assert answers[0].artifact["outcome"] == "UNKNOWN"
    # when the harness will be certain, as the MCP endpoint says it
    wait = answers[0].artifact["retry_after_s"]
    assert wait > 0 and f"Call again in {wait:g} s or later." in str(answers[0].content)
    assert answers[1].artifact["outcome"] == "CONFIRMED"
    assert answers[1].artifact["idempotency_key"] == answers[0].artifact["idempotency_key"]
    assert len([t for t in world.truth()["tickets"] if t["system"] == "jira"]) == 1


def test_langchain_tools_answer_a_refused_call_instead_of_raising(
        mcp_sidecar: MCPSidecar, world: World) -> None:
    """A request the sidecar refuses (an argument only the harness sets, a call after the run
    ended) is a tool message the model can act on, worded as the MCP endpoint words it; the
    graph goes on, and nothing was called or written."""
    listing = run(sidecar_tools(mcp_sidecar.url))
    with mcp_sidecar.grpc() as client:
        client.begin_run("run-refused")
        graph = StateGraph(MessagesState)
        graph.add_node("tools", ToolNode(saga_tools(client, "run-refused", listing)))
        graph.add_edge(START, "tools")
        node = graph.compile()

        def ask(name: str, args: dict[str, str]) -> ToolMessage:
            message = AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": "c"}])
            answer: ToolMessage = node.invoke({"messages": [message]})["messages"][-1]
            return answer

        keyed = ask("create_ticket", {**TICKET, "idempotency_key": "mine"})
        ended = ask("agentsaga_end_run", {"outcome": "Failed"})
        after = ask("create_ticket", TICKET)
        steps = client.get_run("run-refused").steps
    assert str(keyed.content).startswith("REFUSED (nothing was called): ")
    assert "idempotency_key" in str(keyed.content)
    assert keyed.artifact == {"outcome": "REFUSED", "error": "invalid_argument",
                              "is_error": True}
    assert '"state": "failed"' in str(ended.content)
    assert str(after.content).startswith("REFUSED (nothing was called or recorded): ")
    assert "has ended" in str(after.content)
    assert list(steps) == [] and world.truth()["tickets"] == []


def test_openai_agents_function_tools_without_mcp_go_through_the_saga_log(
        mcp_sidecar: MCPSidecar, world: World) -> None:
    from agents import Agent, Runner, set_tracing_disabled
    from agents.testing import ScriptedModel, assistant_message, function_call

    from agentsaga.adapters.openai_agents import function_tools
    from agentsaga.client import AsyncSagaClient

    set_tracing_disabled(True)

    async def main() -> None:
        client = AsyncSagaClient(mcp_sidecar.address)
        await client.begin_run("run-functions")
        model = ScriptedModel([[function_call("create_ticket", TICKET, call_id="c1")],
                               [assistant_message("done")]])
        listing = await sidecar_tools(mcp_sidecar.url)
        agent = Agent(name="support", model=model,
                      tools=function_tools(client, "run-functions", listing))
        await Runner.run(agent, "open a ticket")
        await client.close()

    asyncio.run(main())
    with mcp_sidecar.grpc() as client:
        steps = client.get_run("run-functions").steps
    assert [(s.tool, s.status) for s in steps] == [("create_ticket", "CONFIRMED")]
    assert len(world.truth()["tickets"]) == 1


def test_openai_agents_function_tools_answer_a_refused_call_and_the_run_goes_on(
        mcp_sidecar: MCPSidecar, world: World) -> None:
    """The model is told what the sidecar refused (and why), as a tool output: the Runner does
    not fail, and the model's next, corrected call goes through."""
    from agents import Agent, Runner, set_tracing_disabled
    from agents.items import ToolCallOutputItem
    from agents.testing import ScriptedModel, assistant_message, function_call

    from agentsaga.adapters.openai_agents import function_tools
    from agentsaga.client import AsyncSagaClient

    set_tracing_disabled(True)

    async def main() -> list[str]:
        client = AsyncSagaClient(mcp_sidecar.address)
        await client.begin_run("run-refused-fn")
        model = ScriptedModel([
            [function_call("create_ticket", {**TICKET, "idempotency_key": "k"}, call_id="c1")],
            [function_call("create_ticket", TICKET, call_id="c2")],
            [assistant_message("done")]])
        listing = await sidecar_tools(mcp_sidecar.url)
        agent = Agent(name="support", model=model,
                      tools=function_tools(client, "run-refused-fn", listing))
        result = await Runner.run(agent, "open a ticket")
        await client.close()
        return [str(item.output) for item in result.new_items
                if isinstance(item, ToolCallOutputItem)]

    outputs = asyncio.run(main())
    assert outputs[0].startswith("REFUSED (nothing was called): ")
    assert "idempotency_key" in outputs[0]
    assert '"id"' in outputs[1]  # the corrected call: the ticket
    with mcp_sidecar.grpc() as client:
        steps = client.get_run("run-refused-fn").steps
    assert [(s.tool, s.status) for s in steps] == [("create_ticket", "CONFIRMED")]
    assert len(world.truth()["tickets"]) == 1


def test_the_readme_pydantic_ai_example_calls_through_the_sidecar(
        mcp_sidecar: MCPSidecar, world: World) -> None:
    from pydantic_ai import Agent
    from pydantic_ai.mcp import MCPToolset
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    def scripted(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            assert "create_ticket" in {t.name for t in info.function_tools}
            return ModelResponse(parts=[ToolCallPart("create_ticket", TICKET)])
        return ModelResponse(parts=[TextPart("done")])

    # the README's example, with a scripted model in place of a real one
    toolset = MCPToolset(mcp_sidecar.url, headers=run_headers("run-pydantic-ai"))
    agent: Agent[None, str] = Agent(FunctionModel(scripted), toolsets=[toolset])
    result = agent.run_sync("open a ticket")
    assert result.output == "done"
    with mcp_sidecar.grpc() as client:
        steps = client.get_run("run-pydantic-ai").steps
    assert [(s.tool, s.status) for s in steps] == [("create_ticket", "CONFIRMED")]
    assert len(world.truth()["tickets"]) == 1


