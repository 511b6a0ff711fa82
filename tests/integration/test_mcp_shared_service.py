"""MCP and gRPC are two thin front ends over one `SagaService`: a run begun through one is served
through the other, a run's rate limit is one budget, a run adopted elsewhere is refused by both,
and a refusal means the same (its error code) whichever front end said it. Real servers on
loopback ports, the official MCP client, the gRPC client, a real Postgres."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from agentsaga.client import RateLimited, Refused, RunTakenOver, SagaClient
from agentsaga.saga.registry import JSON, Compensation, Effect, Registry, ref
from agentsaga.service import requests
from agentsaga.service.saga_service import SagaService
from agentsaga.settings import Settings
from agentsaga.sidecar.mcp_endpoint import handlers
from agentsaga.sidecar.mcp_endpoint.handlers import Endpoint
from agentsaga.sidecar.mcp_endpoint.serving import MCPServing, serve_mcp
from agentsaga.sidecar.server import Serving, SidecarServicer, serve
from agentsaga.store import SagaLog
from agentsaga.v1 import sidecar_pb2 as pb
from agentsaga_lab.world import ManualClock
from sagatest.mcp_fixtures import run


@dataclass
class Notes:
    """A real system in miniature: the notes created, by idempotency key."""

    made: dict[str, JSON]

    def registry(self) -> Registry:
        registry = Registry()

        def create_note(text: str, idempotency_key: str) -> Effect:
            note = self.made.setdefault(idempotency_key, {"id": f"note-{len(self.made) + 1}",
                                                          "text": text})
            return Effect(str(note["id"]), dict(note))

        def delete_note(note: str, idempotency_key: str) -> Effect:
            return Effect(note, {"deleted": note})

        def find(key: str) -> Effect | None:
            note = self.made.get(key)
            return None if note is None else Effect(str(note["id"]), dict(note))

        registry.register(create_note, cls="reversible", lookup=find,
                          compensate=lambda args, key: Compensation("delete_note",
                                                                    {"note": ref(key)}))
        registry.register(delete_note, cls="irreversible", lookup=find)
        return registry


@dataclass
class FrontEnds:
    service: SagaService
    grpc: SagaClient
    mcp_url: str
    notes: Notes
    clock: ManualClock


@pytest.fixture
def front_ends(pg: str) -> Iterator[FrontEnds]:
    notes, clock = Notes({}), ManualClock()
    saga_log = SagaLog(pg, min_size=1, max_size=4).open()
    service = SagaService(saga_log, notes.registry(),
                          Settings(recheck_pause_s=0, max_calls_per_s=1), clock=clock)
    serving: Serving = serve(SidecarServicer(service), "127.0.0.1:0", workers=4)
    mcp: MCPServing = serve_mcp(Endpoint(service).server(), "127.0.0.1:0")
    client = SagaClient(serving.address, timeout=30)
    try:
        yield FrontEnds(service, client, mcp.url, notes, clock)
    finally:
        client.close()
        mcp.stop()
        serving.stop()
        saga_log.close()


async def _mcp_calls(url: str, run_id: str,
                     calls: list[tuple[str, dict[str, Any]]]) -> list[types.CallToolResult]:
    http = httpx2.AsyncClient(headers={"Agentsaga-Run-Id": run_id})
    async with Client(streamable_http_client(url, http_client=http)) as client:
        return [await client.call_tool(tool, args) for tool, args in calls]


def _mcp(ends: FrontEnds, run_id: str, tool: str, args: dict[str, Any]) -> types.CallToolResult:
    (result,) = run(_mcp_calls(ends.mcp_url, run_id, [(tool, args)]))
    return result


def _text(result: types.CallToolResult) -> str:
    return "".join(c.text for c in result.content if isinstance(c, types.TextContent))


def _error(result: types.CallToolResult) -> str:
    assert result.is_error and result.meta is not None
    assert result.meta["agentsaga.io/outcome"] == "REFUSED"
    return str(result.meta["agentsaga.io/error"])


def test_a_run_begun_over_mcp_is_served_over_grpc_under_one_rate_limit(
        front_ends: FrontEnds) -> None:
    ends = front_ends
    first = _mcp(ends, "shared-1", "create_note", {"text": "one"})
    assert not first.is_error and first.meta is not None
    assert first.meta["agentsaga.io/outcome"] == "CONFIRMED"
    # the run's budget (1 call/s) is spent: gRPC is refused too, and so is MCP, with one meaning
    with pytest.raises(RateLimited):
        ends.grpc.dispatch("shared-1", "create_note", {"text": "two"})
    refused = _mcp(ends, "shared-1", "create_note", {"text": "three"})
    assert _error(refused) == "resource_exhausted"
    assert _text(refused).startswith("SLOW DOWN")
    ends.clock.advance(1.0)
    # no BeginRun over gRPC: the MCP call began the run in this service, which holds its epoch
    second = ends.grpc.dispatch("shared-1", "create_note", {"text": "two"})
    assert second["text"] == "two"
    steps = ends.grpc.get_run("shared-1").steps
    assert [(s.tool, s.status) for s in steps] == [("create_note", "CONFIRMED")] * 2
    assert [n["text"] for n in ends.notes.made.values()] == ["one", "two"]


def test_a_run_adopted_elsewhere_is_refused_by_both_front_ends(
        front_ends: FrontEnds, pg: str) -> None:
    ends = front_ends
    _mcp(ends, "shared-2", "create_note", {"text": "one"})
    other_log = SagaLog(pg, min_size=1, max_size=2).open()
    try:
        other = SagaService(other_log, ends.notes.registry(), Settings(recheck_pause_s=0))
        assert other.begin_run("shared-2").adopted  # R12: the epoch moves on
    finally:
        other_log.close()
    ends.clock.advance(1.0)
    taken = _mcp(ends, "shared-2", "create_note", {"text": "two"})
    assert _error(taken) == "taken_over"
    assert _text(taken).startswith("RUN TAKEN OVER")
    ends.clock.advance(1.0)
    with pytest.raises(RunTakenOver):
        ends.grpc.dispatch("shared-2", "create_note", {"text": "three"})
    assert [n["text"] for n in ends.notes.made.values()] == ["one"]


@pytest.mark.parametrize(("tool", "args", "code", "status"), [
    ("create_note", {"text": "a\u0000b"}, "invalid_argument", grpc.StatusCode.INVALID_ARGUMENT),
    ("send_fax", {"to": "x"}, "not_found", grpc.StatusCode.NOT_FOUND),
])
def test_a_bad_call_means_the_same_refusal_on_both_front_ends(
        front_ends: FrontEnds, tool: str, args: dict[str, Any], code: str,
        status: grpc.StatusCode) -> None:
    ends = front_ends
    refused = _mcp(ends, f"bad-{code}", tool, args)
    assert _error(refused) == code
    assert _text(refused).startswith("REFUSED (nothing was called)")
    ends.clock.advance(1.0)
    with pytest.raises(Refused) as caught:
        ends.grpc.dispatch(f"bad-{code}", tool, args)
    assert caught.value.code() is status
    assert ends.grpc.get_run(f"bad-{code}").steps == []
    assert ends.notes.made == {}


def test_a_plan_step_too_large_to_dispatch_is_refused_when_staged_on_both_front_ends(
        front_ends: FrontEnds) -> None:
    """A commit step whose arguments no dispatch would take (AGENTSAGA_MAX_ARGS_BYTES) is
    refused when the plan is staged, in the dispatch's words, not after its approval."""
    ends = front_ends
    big = {"note": "x" * (1 << 20)}
    plan = [{"tool": "delete_note", "args": big}]
    refused = _mcp(ends, "plan-big", "agentsaga_reach_pivot", {"plan": plan})
    assert _error(refused) == "invalid_argument"
    with pytest.raises(Refused) as staged:
        ends.grpc.reach_pivot("plan-big", plan)
    assert staged.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(Refused) as dispatched:
        ends.grpc.dispatch("plan-big", "delete_note", big)
    assert dispatched.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    words = str(dispatched.value.details()).split(" Pass large content")[0]
    assert words.startswith("arguments are ") and "(AGENTSAGA_MAX_ARGS_BYTES)" in words
    for said in (_text(refused), str(staged.value.details())):
        assert f"commit step 0: {words} Pass large content by reference" in said, said
        assert "Nothing was staged" in said
    run = ends.service.saga_log.require_run("plan-big")
    assert run.pivot is None and run.state == "running"
    assert ends.grpc.get_run("plan-big").steps == []


def _raw_tools_call(url: str, run_id: str, body: str) -> dict[str, Any]:
    """A tools/call as bytes on the wire: no MCP client would send a key twice."""
    answer = httpx2.post(url, content=body.encode(), timeout=30, headers={
        "Agentsaga-Run-Id": run_id, "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream"})
    assert answer.status_code == 200, answer.text
    result: dict[str, Any] = answer.json()["result"]
    return result


def test_a_key_named_twice_is_refused_on_both_front_ends_before_anything_is_written(
        front_ends: FrontEnds) -> None:
    """JSON parsers disagree on which of two values of one key wins: the sidecar takes neither,
    and says which key."""
    ends = front_ends
    arguments = '{"text": "one", "text": "two"}'
    result = _raw_tools_call(ends.mcp_url, "twice", (
        '{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "create_note", '
        f'"arguments": {arguments}}}}}'))
    assert result["isError"] and result["_meta"]["agentsaga.io/error"] == "invalid_argument"
    said = "".join(c["text"] for c in result["content"])
    assert "the key 'text' appears twice in one JSON object" in said, said
    assert ends.service.saga_log.run("twice") is None  # not even begun
    ends.grpc.begin_run("twice")
    with pytest.raises(grpc.RpcError) as caught:
        ends.grpc.stub.Dispatch(pb.DispatchRequest(run_id="twice", tool="create_note",
                                                   args_json=arguments))
    assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "the key 'text' appears twice in one JSON object" in str(caught.value.details())
    with pytest.raises(grpc.RpcError) as staged:
        ends.grpc.stub.ReachPivot(pb.ReachPivotRequest(run_id="twice", commit_plan_json=(
            '[{"tool": "delete_note", "args": {"note": "a", "note": "b"}}]')))
    assert staged.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "the key 'note' appears twice" in str(staged.value.details())
    run_after = ends.service.saga_log.require_run("twice")
    assert run_after.pivot is None and ends.grpc.get_run("twice").steps == []
    assert ends.notes.made == {}


def test_an_mcp_call_s_arguments_are_parsed_once_and_passed_on(
        front_ends: FrontEnds, monkeypatch: pytest.MonkeyPatch) -> None:
    """The sidecar reads a tools/call's text once (the MCP library's own reading aside): the
    arguments, and a plan inside them, go on to the dispatch and the staging as parsed."""
    parsed: list[str] = []
    loads = requests.loads

    def counted(text: str, limit: int, what: str) -> Any:
        parsed.append(what)
        return loads(text, limit, what)

    monkeypatch.setattr(handlers, "loads", counted)
    monkeypatch.setattr(requests, "loads", counted)
    ends = front_ends
    made = _mcp(ends, "once", "create_note", {"text": "hello"})
    assert not made.is_error and [n["text"] for n in ends.notes.made.values()] == ["hello"]
    assert parsed == ["arguments"]
    parsed.clear()
    ends.clock.advance(1.0)
    plan = [{"tool": "delete_note", "args": {"note": "note-1"}}]
    staged = _mcp(ends, "once", "agentsaga_reach_pivot", {"plan": plan})
    assert not staged.is_error, _text(staged)
    assert parsed == ["arguments"]
    run_after = ends.service.saga_log.require_run("once")
    assert run_after.pivot is not None
    assert [(s["tool"], s["args"]) for s in run_after.pivot.commit] == [
        ("delete_note", {"note": "note-1"})]
