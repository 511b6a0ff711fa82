"""The sidecar's tools as its MCP endpoint lists them, and one call through the gRPC client
answered the way a model should read it (the wording of SYSTEM_PROMPT)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from agentsaga.client import AsyncSagaClient, SagaClient
from agentsaga.v1 import sidecar_pb2 as pb
from agentsaga.wording import tool_message

RUN_HEADER = "Agentsaga-Run-Id"
AGENT_HEADER = "Agentsaga-Agent"
SAGA_TOOLS = ("agentsaga_reach_pivot", "agentsaga_await_decision", "agentsaga_end_run")


def run_headers(run_id: str, agent: str = "") -> dict[str, str]:
    return {RUN_HEADER: run_id, **({AGENT_HEADER: agent} if agent else {})}


async def sidecar_tools(mcp_url: str, run_id: str = "", agent: str = "") -> list[types.Tool]:
    """`tools/list` of the sidecar's MCP endpoint: every tool with its JSON Schema and class."""
    http = httpx2.AsyncClient(headers=run_headers(run_id, agent) if run_id else {})
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
    return Answer(tool_message(outcome, response.message), outcome, True, meta)


def _record(value: Any) -> Answer:
    return Answer(json.dumps(value, default=str), "CONFIRMED", False, {})


def call(client: SagaClient, run_id: str, tool: str, args: dict[str, Any]) -> Answer:
    """One call through the blocking gRPC client (the three saga tools included)."""
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


async def acall(client: AsyncSagaClient, run_id: str, tool: str,
                args: dict[str, Any]) -> Answer:
    """The same through the asyncio gRPC client."""
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
