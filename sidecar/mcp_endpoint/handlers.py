"""The MCP server of the sidecar: `tools/list` and `tools/call` over `SagaService`, nothing more.

    tools/list ... every registered tool with its JSON Schema and its class (R1) in the
                   description; plus agentsaga_reach_pivot, agentsaga_await_decision and
                   agentsaga_end_run, so that a model can stage its plan and wait for a human
    tools/call ... the run: the request's `Agentsaga-Run-Id` header, else the run this pod is
                   bound to (AGENTSAGA_POD_RUN_ID); neither is a protocol error saying how to
                   give one. The first call of a run in this process begins or adopts it
                   (`SagaService.ensure_begun`). Then the service decides, with the same
                   validation, run lock, request budgets (`admit_request`), rate limit and
                   epochs as a gRPC call; `outcomes` words
                   the answer, and a refusal is worded by its `error_code` (`outcomes.REFUSALS`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

import anyio.to_thread
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError

from agentsaga.calls import ToolInfo
from agentsaga.errors import InvalidArguments, SagaError
from agentsaga.saga import pivot
from agentsaga.service.requests import checked_plan, loads
from agentsaga.service.saga_service import SagaService
from agentsaga.sidecar.mcp_endpoint import outcomes
from agentsaga.store import PivotRecord

logger = logging.getLogger(__name__)

RUN_HEADER = "Agentsaga-Run-Id"
AGENT_HEADER = "Agentsaga-Agent"

REACH_PIVOT = "agentsaga_reach_pivot"
AWAIT_DECISION = "agentsaga_await_decision"
END_RUN = "agentsaga_end_run"
MAX_WAIT_S = 600.0

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
            "type": "number", "minimum": 0, "maximum": MAX_WAIT_S, "default": 30}}},
    ),
    types.Tool(
        name=END_RUN,
        description="End the run: Succeeded when every step is CONFIRMED, else Failed.",
        input_schema={"type": "object", "properties": {"outcome": {
            "enum": ["Succeeded", "Failed"], "default": "Succeeded"}}},
    ),
)


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
    headers: Mapping[str, str] | None = getattr(ctx.request, "headers", None)
    return (headers.get(name) or "").strip() if headers is not None else ""


class Endpoint:
    """The handlers of the MCP server, over the sidecar's `SagaService`."""

    def __init__(self, service: SagaService, *, pod_run_id: str = "") -> None:
        self.service = service
        self.pod_run_id = pod_run_id

    def server(self) -> Server[Any]:
        return Server("agentsaga-sidecar", version="1", instructions=outcomes.SYSTEM_PROMPT,
                      on_list_tools=self.list_tools, on_call_tool=self.call_tool)

    async def list_tools(self, ctx: ServerRequestContext[Any, Any],
                         params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        def listed() -> list[ToolInfo]:
            self.service.admit_request()  # the total budget, as gRPC's ListTools
            return self.service.list_tools()

        try:
            tools = await anyio.to_thread.run_sync(listed)
        except SagaError as exc:
            raise MCPError(types.INTERNAL_ERROR, str(exc)) from None
        return types.ListToolsResult(tools=[offered(t) for t in tools] + list(SAGA_TOOLS))

    def run_of(self, ctx: ServerRequestContext[Any, Any]) -> str:
        run_id = header(ctx, RUN_HEADER) or self.pod_run_id
        if not run_id:
            raise MCPError(types.INVALID_PARAMS, NO_RUN)
        return run_id

    async def call_tool(self, ctx: ServerRequestContext[Any, Any],
                        params: types.CallToolRequestParams) -> types.CallToolResult:
        run_id = self.run_of(ctx)
        args = dict(params.arguments or {})
        agent = header(ctx, AGENT_HEADER)
        raw = await request_body(ctx)
        return await anyio.to_thread.run_sync(lambda: answered(
            params.name, lambda: self.call(run_id, agent, params.name, args, raw=raw)))

    def call(self, run_id: str, agent: str, tool: str, args: dict[str, Any], *,
             raw: str = "") -> types.CallToolResult:
        """One tools/call: its arguments as read from the request's text (`raw`, see
        `sent_arguments`), the run begun or adopted once, then the service's answer, the
        arguments passed on as parsed."""
        service = self.service
        # the request budgets every gRPC call draws on (per run, and over all runs): one
        # budget for both front ends
        service.admit_request(run_id)
        if raw:
            args = sent_arguments(raw, service.settings.max_json_depth, args)
        service.ensure_begun(run_id, agent=agent)
        if tool == REACH_PIVOT:
            # gRPC's ReachPivot checks the same, on the plan's text: its size, its steps
            plan = checked_plan(args.get("plan"), service.settings.max_plan_bytes)
            return _record(_pivot_json(service.reach_pivot(run_id, plan)))
        if tool == AWAIT_DECISION:
            timeout = _seconds(args.get("timeout_seconds", 30), "timeout_seconds")
            return _record(_pivot_json(service.await_decision(run_id, timeout)))
        if tool == END_RUN:
            run = service.end_run(run_id, str(args.get("outcome", "Succeeded")))
            return _record({"run_id": run.run_id, "state": str(run.state)})
        # the raw-request path of gRPC's Dispatch: run id, rate limit, size and NUL checks
        return outcomes.tool_result(service.dispatch_request(run_id, tool, args))


def sent_arguments(raw: str, depth: int, given: dict[str, Any]) -> dict[str, Any]:
    """The arguments of the tools/call whose request's text is `raw`, read by the one parser of
    agents' JSON (`requests.loads`: depth checked first, a key named twice refused, which the
    MCP library's own reading keeps the last of) once, and passed on as they are; `given`, the
    library's reading, when the text carries no such arguments."""
    message = loads(raw, depth + 2, "arguments")
    params = message.get("params") if isinstance(message, dict) else None
    found = params.get("arguments") if isinstance(params, dict) else None
    return found if isinstance(found, dict) else given


async def request_body(ctx: ServerRequestContext[Any, Any]) -> str:
    """The text of the HTTP request a tools/call came in (read once by the MCP library, which
    keeps it); empty when the transport has none."""
    body = getattr(ctx.request, "body", None)
    if body is None:
        return ""
    data = await body()
    return data.decode("utf-8", "replace") if isinstance(data, bytes) else ""


def answered(tool: str, call: Callable[[], types.CallToolResult]) -> types.CallToolResult:
    """A refusal (a SagaError) as the model reads it, by its error code; anything else (a bug)
    as an internal error without internals."""
    try:
        return call()
    except SagaError as exc:
        return outcomes.refusal(exc)
    except Exception as exc:
        logger.exception("MCP tools/call %s failed", tool)
        return outcomes.internal_error(tool, exc)


def _pivot_json(record: PivotRecord | None) -> dict[str, Any]:
    return {} if record is None else pivot.shown(record)


def _record(record: dict[str, Any]) -> types.CallToolResult:
    text = json.dumps(record, default=str)
    return types.CallToolResult(content=[types.TextContent(text=text)],
                                structured_content=json.loads(text))


def _seconds(value: Any, name: str) -> float:
    """A wait in seconds, at most MAX_WAIT_S (a longer one is cut to it)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise InvalidArguments(f"{name} must be a number of seconds, at least 0")
    return min(float(value), MAX_WAIT_S)
