"""The sidecar's tools as its MCP endpoint lists them, and one call through the gRPC client
answered the way a model should read it (the wording of SYSTEM_PROMPT), as the MCP endpoint
answers it:

    CONFIRMED ....................... the tool's result
    any other outcome ............... its SYSTEM_PROMPT line, with when to call again where the
                                      sidecar knows (retry-after)
    a request the sidecar refused ... its refusal's first words (`wording.REFUSALS`) and why:
                                      bad arguments, an ended run, a run taken over, too many
                                      calls; nothing was called, and the model can act on it
    the sidecar lost mid-call ....... OUTCOME UNKNOWN: the call may have happened
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import grpc

from agentsaga.client import AsyncSagaClient, SagaClient, auth_headers
from agentsaga.client.codec import ERROR_CODES, maybe_happened
from agentsaga.errors import ErrorCode
from agentsaga.extras import require
from agentsaga.saga.wording import REFUSALS, tool_message
from agentsaga.v1 import sidecar_pb2 as pb

# the product has the MCP SDK; the agent side (agentsaga-client) with either framework's extra
require("openai-agents", "mcp", "mcp_types", "httpx2",
        what="the adapters' MCP listing (either framework's extra brings it)")

import httpx2  # noqa: E402
import mcp_types as types  # noqa: E402
from mcp import Client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

RUN_HEADER = "Agentsaga-Run-Id"
AGENT_HEADER = "Agentsaga-Agent"
SAGA_TOOLS = ("agentsaga_reach_pivot", "agentsaga_await_decision", "agentsaga_end_run")


def run_headers(run_id: str, agent: str = "") -> dict[str, str]:
    return {RUN_HEADER: run_id, **({AGENT_HEADER: agent} if agent else {})}


async def sidecar_tools(mcp_url: str, run_id: str = "", agent: str = "",
                        token: str | None = None) -> list[types.Tool]:
    """`tools/list` of the sidecar's MCP endpoint: every tool with its JSON Schema and class;
    with the pod's access token when one is configured (`token`, else
    AGENTSAGA_ACCESS_TOKEN_FILE)."""
    headers = {**(run_headers(run_id, agent) if run_id else {}), **auth_headers(token)}
    http = httpx2.AsyncClient(headers=headers)
    async with Client(streamable_http_client(mcp_url, http_client=http)) as client:
        return list((await client.list_tools()).tools)


@dataclass(frozen=True)
class Answer:
    """A tool call's answer for a model: the text, and what a harness reads."""

    text: str
    outcome: str
    is_error: bool
    meta: dict[str, Any] = field(default_factory=dict)


def answer(response: pb.DispatchResponse) -> Answer:
    outcome = pb.Outcome.Name(response.outcome)
    meta = {"outcome": outcome, "step_idx": response.step_idx,
            "idempotency_key": response.idempotency_key}
    if response.outcome == pb.CONFIRMED:
        return Answer(response.result_json or "null", outcome, False, meta)
    retry_after = response.retry_after_s if response.HasField("retry_after_s") else None
    if retry_after is not None:
        meta["retry_after_s"] = retry_after
    return Answer(tool_message(outcome, response.message, retry_after), outcome, True, meta)


def refused(exc: grpc.RpcError, *, in_a_tool_call: bool) -> Answer:
    """A failed request as the model reads it: a refusal (nothing was called), or, for a tool
    call whose sidecar was lost on the way, an unknown outcome."""
    call: Any = exc  # the client's Refused or RunTakenOver: code() and details()
    code: grpc.StatusCode = call.code()
    details = str(call.details())
    if in_a_tool_call and maybe_happened(code):
        outcome = pb.Outcome.Name(pb.UNKNOWN)
        text = tool_message(outcome, f"the sidecar answered {code.name}: {details}")
        return Answer(text, outcome, True, {"outcome": outcome, "error": code.name.lower()})
    kind = ERROR_CODES.get(code, ErrorCode.FAILED_PRECONDITION)
    return Answer(f"{REFUSALS[kind]}: {details}", "REFUSED", True,
                  {"outcome": "REFUSED", "error": str(kind)})


def _record(value: Any) -> Answer:
    return Answer(json.dumps(value, default=str), "CONFIRMED", False, {})


def call(client: SagaClient, run_id: str, tool: str, args: dict[str, Any]) -> Answer:
    """One call through the blocking gRPC client (the three saga tools included)."""
    try:
        return _call(client, run_id, tool, args)
    except grpc.RpcError as exc:
        return refused(exc, in_a_tool_call=tool not in SAGA_TOOLS)


async def acall(client: AsyncSagaClient, run_id: str, tool: str,
                args: dict[str, Any]) -> Answer:
    """The same through the asyncio gRPC client."""
    try:
        return await _acall(client, run_id, tool, args)
    except grpc.RpcError as exc:
        return refused(exc, in_a_tool_call=tool not in SAGA_TOOLS)


def _call(client: SagaClient, run_id: str, tool: str, args: dict[str, Any]) -> Answer:
    if tool == "agentsaga_reach_pivot":
        staged = client.reach_pivot(run_id, list(args.get("plan") or []))
        return _record({"state": staged.state, "planHash": staged.plan_hash})
    if tool == "agentsaga_await_decision":
        decided = client.await_decision(run_id, float(args.get("timeout_seconds", 30)))
        return _record({"state": decided.state, "planHash": decided.plan_hash})
    if tool == "agentsaga_end_run":
        ended = client.end_run(run_id, str(args.get("outcome", "Succeeded")))
        return _record({"run_id": ended.run_id, "state": ended.state})
    return answer(client.dispatch_raw(run_id, tool, args))


async def _acall(client: AsyncSagaClient, run_id: str, tool: str,
                 args: dict[str, Any]) -> Answer:
    if tool == "agentsaga_reach_pivot":
        staged = await client.reach_pivot(run_id, list(args.get("plan") or []))
        return _record({"state": staged.state, "planHash": staged.plan_hash})
    if tool == "agentsaga_await_decision":
        decided = await client.await_decision(run_id, float(args.get("timeout_seconds", 30)))
        return _record({"state": decided.state, "planHash": decided.plan_hash})
    if tool == "agentsaga_end_run":
        ended = await client.end_run(run_id, str(args.get("outcome", "Succeeded")))
        return _record({"run_id": ended.run_id, "state": ended.state})
    return answer(await client.dispatch_raw(run_id, tool, args))
