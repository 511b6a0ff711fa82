"""The MCP server of the sidecar: `tools/list` and `tools/call` over the saga service.

    tools/list ... every registered tool with its JSON Schema and its class (R1) in the
                   description; plus agentsaga_reach_pivot, agentsaga_await_decision and
                   agentsaga_end_run, so that a model can stage its plan and wait for a human
    tools/call ... the run: the request's `Agentsaga-Run-Id` header, else the run this pod is
                   bound to (AGENTSAGA_POD_RUN_ID); neither is a protocol error saying how to
                   give one. The first call of a run in this process begins or adopts it.
                   Then the service decides; `outcomes` words the answer.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import anyio.to_thread
import mcp_types as types
import psycopg
from agentsaga.sidecar.mcp_endpoint import outcomes
from agentsaga.sidecar.mcp_endpoint.port import SagaPort, ToolInfo
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError

from agentsaga import errors

log = logging.getLogger(__name__)

RUN_HEADER = "Agentsaga-Run-Id"
AGENT_HEADER = "Agentsaga-Agent"

REACH_PIVOT = "agentsaga_reach_pivot"
AWAIT_DECISION = "agentsaga_await_decision"
END_RUN = "agentsaga_end_run"

NO_RUN = (
    "this MCP session names no run: send the HTTP header `Agentsaga-Run-Id: <run id>` with "
    "every request (e.g. MCPServerStreamableHttp(params={'url': ..., 'headers': "
    "{'Agentsaga-Run-Id': 'refund-1182'}})), or bind the pod to a run with the annotation "
    "agentsaga.io/run-id (the chart passes it to the sidecar as AGENTSAGA_POD_RUN_ID)"
)

SAGA_TOOLS: tuple[types.Tool, ...] = (
    types.Tool(
        name=REACH_PIVOT,
        description=(
            "Stage the rest of the plan (the commit steps: capture a payment, open a ticket, "
            "send the email) for one human approval, then call agentsaga_await_decision. "
            "Nothing in the plan runs until a person approves it."),
        input_schema={"type": "object", "required": ["plan"], "properties": {"plan": {
            "type": "array", "description": "the commit steps, in order",
            "items": {"type": "object", "required": ["tool", "args"], "properties": {
                "tool": {"type": "string"}, "args": {"type": "object"}}}}}},
    ),
    types.Tool(
        name=AWAIT_DECISION,
        description=("Wait for the human's decision on the staged plan: Approved (then call "
                     "the commit steps) or Rejected (the run is unwound; stop)."),
        input_schema={"type": "object", "properties": {"timeout_seconds": {
            "type": "number", "minimum": 0, "maximum": 600, "default": 30}}},
    ),
    types.Tool(
        name=END_RUN,
        description="End the run: Succeeded when every step is CONFIRMED, else Failed.",
        input_schema={"type": "object", "properties": {"outcome": {
            "enum": ["Succeeded", "Failed"], "default": "Succeeded"}}},
    ),
)

# A refused request as the model reads it (nothing was written or called); the order matters:
# subclasses first.
_REFUSALS: tuple[tuple[type[Exception], str], ...] = (
    (errors.Fenced, "RUN TAKEN OVER: another owner adopted this run; stop calling tools"),
    (errors.DatabaseUnavailable, "the saga log is unreachable; nothing was called. Try again "
                                 "later"),
    (errors.RequestError, "REFUSED (nothing was called)"),
    (errors.PivotError, "REFUSED (nothing was recorded)"),
    (errors.SagaError, "REFUSED"),
)


@dataclass(frozen=True)
class RunSource:
    """Where a session's run comes from when its requests carry no header."""

    pod_run_id: str = ""


def describe(tool: ToolInfo) -> str:
    """The class leads the description, so that a model (and a person) sees it first."""
    text = tool.description.strip().splitlines()[0] if tool.description.strip() else ""
    return f"[{tool.tool_class}] {text}".strip()


def offered(tool: ToolInfo) -> types.Tool:
    schema = dict(tool.input_schema)
    schema.setdefault("type", "object")
    return types.Tool(name=tool.name, description=describe(tool), input_schema=schema,
                      annotations=types.ToolAnnotations(read_only_hint=tool.read_only))


def header(ctx: ServerRequestContext[Any, Any], name: str) -> str:
    request = ctx.request
    headers: Mapping[str, str] | None = getattr(request, "headers", None)
    return (headers.get(name) or "").strip() if headers is not None else ""


class Endpoint:
    """The handlers of the MCP server, over a `SagaPort`."""

    def __init__(self, service: SagaPort, source: RunSource) -> None:
        self.service = service
        self.source = source

    def server(self) -> Server[Any]:
        return Server("agentsaga-sidecar", version="1",
                      instructions=outcomes.SYSTEM_PROMPT_TEXT,
                      on_list_tools=self.list_tools, on_call_tool=self.call_tool)

    async def list_tools(self, ctx: ServerRequestContext[Any, Any],
                         params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        tools = await anyio.to_thread.run_sync(self.service.list_tools)
        return types.ListToolsResult(tools=[offered(t) for t in tools] + list(SAGA_TOOLS))

    def run_of(self, ctx: ServerRequestContext[Any, Any]) -> str:
        run_id = header(ctx, RUN_HEADER) or self.source.pod_run_id
        if not run_id:
            raise MCPError(types.INVALID_PARAMS, NO_RUN)
        return run_id

    async def call_tool(self, ctx: ServerRequestContext[Any, Any],
                        params: types.CallToolRequestParams) -> types.CallToolResult:
        run_id = self.run_of(ctx)
        args = dict(params.arguments or {})
        call = self._call(run_id, header(ctx, AGENT_HEADER), params.name, args)
        return await anyio.to_thread.run_sync(call)

    def _call(self, run_id: str, agent: str, tool: str,
              args: dict[str, Any]) -> Callable[[], types.CallToolResult]:
        def call() -> types.CallToolResult:
            try:
                if not self.service.is_begun_here(run_id):
                    self.service.begin_or_adopt(run_id, agent=agent)
                if tool == REACH_PIVOT:
                    return _record(self.service.reach_pivot(run_id, _plan(args)))
                if tool == AWAIT_DECISION:
                    timeout = _number(args.get("timeout_seconds", 30), "timeout_seconds")
                    return _record(self.service.await_decision(run_id, min(timeout, 600.0)))
                if tool == END_RUN:
                    state = self.service.end_run(run_id, str(args.get("outcome", "Succeeded")))
                    return _record({"run_id": run_id, "state": state})
                return outcomes.tool_result(self.service.dispatch(run_id, tool, args))
            except (errors.SagaError, psycopg.Error) as exc:
                return _refusal(exc)
        return call


def _refusal(exc: Exception) -> types.CallToolResult:
    if isinstance(exc, psycopg.Error):
        exc = errors.DatabaseUnavailable("the saga log", 0, exc)
    for kind, headline in _REFUSALS:
        if isinstance(exc, kind):
            result = types.CallToolResult(
                content=[types.TextContent(text=f"{headline}: {exc}")], is_error=True)
            result.meta = {outcomes.META_OUTCOME: "REFUSED",
                           "agentsaga.io/error": type(exc).__name__}
            return result
    raise exc


def _record(record: dict[str, Any]) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=json.dumps(record, default=str))],
                                structured_content=json.loads(json.dumps(record, default=str)))


def _plan(args: dict[str, Any]) -> list[dict[str, Any]]:
    plan = args.get("plan")
    if not isinstance(plan, list) or not all(
            isinstance(s, dict) and isinstance(s.get("tool"), str) for s in plan):
        raise errors.InvalidArguments(
            'plan must be a list of {"tool": "<name>", "args": {...}}, one per commit step')
    return plan


def _number(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise errors.InvalidArguments(f"{name} must be a number of seconds, at least 0")
    return float(value)
