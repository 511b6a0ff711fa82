"""The sidecar's MCP endpoint with the official MCP client over real HTTP, proxying the world's
MCP server as a declared upstream: listing, R3/R7 through MCP, unwind by the declared
compensation, STEP_UNRESOLVED, and the session that names no run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp.shared.exceptions import MCPError

from agentsaga.client import SYSTEM_PROMPT
from agentsaga_lab.world import Fault, World
from sagatest.mcp_fixtures import ROOT, MCPSidecar, run

TICKET = {"summary": "Refund for order 1182", "order_id": "1182"}
REWORDED = {"summary": "Order #1182 refund", "order_id": "1182"}
CHARGE = {"customer_id": "cus_1182", "amount": 500, "currency": "usd"}
TRANSITIONS = "POST /rest/api/3/issue/{key}/transitions"


async def _list(sidecar: MCPSidecar) -> dict[str, types.Tool]:
    async with sidecar.client("run-list") as client:
        return {t.name: t for t in (await client.list_tools()).tools}


async def _calls(sidecar: MCPSidecar, run_id: str,
                 calls: list[tuple[str, dict[str, Any]]]) -> list[types.CallToolResult]:
    async with sidecar.client(run_id) as client:
        return [await client.call_tool(tool, args) for tool, args in calls]


def _text(result: types.CallToolResult) -> str:
    return "".join(c.text for c in result.content if isinstance(c, types.TextContent))


def test_tools_list_shows_declared_tools_with_schemas_and_hides_the_undeclared(
        mcp_sidecar: MCPSidecar) -> None:
    tools = run(_list(mcp_sidecar))
    ticket = tools["create_ticket"]
    assert ticket.description is not None and ticket.description.startswith("[compensatable]")
    assert set(ticket.input_schema["properties"]) >= {"summary", "order_id", "labels"}
    assert ticket.input_schema["required"] == ["summary", "order_id"]
    assert tools["search_orders"].description.startswith("[pure]")  # type: ignore[union-attr]
    assert tools["search_orders"].annotations.read_only_hint  # type: ignore[union-attr]
    assert "bulk_email_customers" not in tools  # neither read-only nor declared (R1)
    assert {"agentsaga_reach_pivot", "agentsaga_await_decision", "agentsaga_end_run"} <= set(tools)


def test_mcp_check_lists_the_hidden_tool_and_why(upstreams_file: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "agentsaga.cli", "mcp", "check", "--upstreams",
                          str(upstreams_file)], capture_output=True, text=True, cwd=ROOT,
                         timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    line = next(x for x in out.stdout.splitlines() if "bulk_email_customers" in x)
    assert " no " in line and "not declared" in line and "readOnlyHint" in line
    ticket = next(x for x in out.stdout.splitlines() if " create_ticket " in x)
    assert "yes" in ticket and "compensatable" in ticket


def test_commit_then_504_and_a_reworded_retry_make_one_ticket_and_one_close_on_unwind(
        mcp_sidecar: MCPSidecar, world: World) -> None:
    world.faults.add(Fault("POST", "/rest/api/3/issue", "commit_then_504", on_call=1))
    first, retry = run(_calls(mcp_sidecar, "run-504", [("create_ticket", TICKET),
                                                      ("create_ticket", REWORDED)]))
    assert first.is_error and first.meta is not None
    assert first.meta["agentsaga.io/outcome"] == "UNKNOWN"
    assert _text(first).startswith("OUTCOME UNKNOWN: the call may or may not have happened.")
    assert not retry.is_error and retry.meta is not None
    assert retry.meta["agentsaga.io/outcome"] == "CONFIRMED"
    assert retry.meta["agentsaga.io/idempotencyKey"] == first.meta["agentsaga.io/idempotencyKey"]
    tickets = [t for t in world.truth()["tickets"] if t["system"] == "jira"]
    assert len(tickets) == 1  # found by the declared lookup, not created again (R3, R7)
    assert retry.structured_content["id"] == tickets[0]["key"]
    assert tickets[0]["summary"] == TICKET["summary"]

    with mcp_sidecar.grpc() as client:
        report = client.unwind("run-504").report
        again = client.unwind("run-504").report
    assert [c["compensation"] for c in report["compensated"]] == ["close_ticket"]
    assert again["compensated"] == []
    truth = world.truth()
    assert [t["state"] for t in truth["tickets"] if t["system"] == "jira"] == ["closed"]
    assert truth["calls"].get(TRANSITIONS, 0) == 1  # the declared compensation ran once


def test_a_different_tool_while_a_step_is_unknown_is_step_unresolved_and_calls_nothing(
        mcp_sidecar: MCPSidecar, world: World) -> None:
    world.faults.add(Fault("POST", "/rest/api/3/issue", "commit_then_504", on_call=1))
    unknown, other = run(_calls(mcp_sidecar, "run-unresolved", [("create_ticket", TICKET),
                                                               ("charge_card", CHARGE)]))
    assert unknown.meta is not None and unknown.meta["agentsaga.io/outcome"] == "UNKNOWN"
    assert other.is_error and other.meta is not None
    assert other.meta["agentsaga.io/outcome"] == "STEP_UNRESOLVED"
    expected = next(line for line in SYSTEM_PROMPT.splitlines()
                    if line.startswith("- STEP UNRESOLVED:"))[2:]
    assert _text(other).startswith(expected)
    assert world.truth()["payment_intents"] == []


def test_a_session_without_a_run_id_or_a_bound_run_is_refused_saying_how_to_give_one(
        mcp_sidecar: MCPSidecar, world: World) -> None:
    async def call() -> str:
        async with mcp_sidecar.client(None) as client:
            with pytest.raises(MCPError) as caught:
                await client.call_tool("create_ticket", TICKET)
            return caught.value.error.message

    message = run(call())
    assert "Agentsaga-Run-Id" in message and "AGENTSAGA_POD_RUN_ID" in message
    assert world.truth()["tickets"] == []


def test_the_pod_bound_run_serves_a_session_without_the_header(
        pg: str, upstreams_file: Path, mcp_sidecar_factory: Any, world: World) -> None:
    sidecar = mcp_sidecar_factory(pg, upstreams_file, env={"AGENTSAGA_POD_RUN_ID": "pod-run"})
    (result,) = run(_calls(sidecar, None, [("create_ticket", TICKET)]))  # type: ignore[arg-type]
    assert result.meta is not None and result.meta["agentsaga.io/outcome"] == "CONFIRMED"
    with sidecar.grpc() as client:
        steps = client.get_run("pod-run").steps
    assert [(s.tool, s.status) for s in steps] == [("create_ticket", "CONFIRMED")]


def test_the_mcp_endpoint_listens_on_loopback_only_unless_allowed(upstreams_file: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "agentsaga.cli", "sidecar", "--tools",
                          "agentsaga_lab.bench.tools", "--mcp-listen", "0.0.0.0:8765"],
                         capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert out.returncode == 2
    assert "refusing to listen on '0.0.0.0:8765'" in out.stderr and "--allow-remote" in out.stderr
