"""The agent-side client of the sidecar.

    client = SagaClient("127.0.0.1:50051")
    client.begin_run("refund-1182")
    ticket = client.dispatch("refund-1182", "create_ticket", {"summary": ..., "order_id": "1182"})

`dispatch` returns the tool's result, or raises one of:

    ToolCallError
    ├── ToolOutcomeUnknown   it may or may not have happened: do not retry with new arguments
    │   └── SidecarLost      the sidecar died, timed out or broke during the call
    ├── RunTakenOver         another owner adopted the run (R12): stop
    ├── ToolFailed           the real system said no; nothing happened
    ├── StepUnresolved       an earlier step's outcome is unknown: call that tool again first
    ├── ApprovalRequired     a human must approve this at the pivot
    └── ToolNeedsHuman       only a human can settle this step: stop calling it, end the turn

A request the sidecar refuses outright raises `Refused` (`PermissionDenied`, `RateLimited`, ...;
also grpc.RpcErrors with the status code). All are `agentsaga.SagaError`s.
`SagaClient` blocks, `AsyncSagaClient` is the asyncio variant with the same methods; both share
one encoding of requests and decoding of answers (`agentsaga.client.codec`).

Put SYSTEM_PROMPT (below) in the model's system prompt so that it reads these the same way the
harness enforces them.
"""

from __future__ import annotations

import os
from typing import Any, TypeVar

import grpc

from agentsaga import telemetry
from agentsaga.client import codec
from agentsaga.client.codec import Call, SettleResult
from agentsaga.client.errors import (
    ApprovalRequired,
    PermissionDenied,
    RateLimited,
    Refused,
    RunTakenOver,
    SidecarLost,
    StepUnresolved,
    ToolCallError,
    ToolFailed,
    ToolNeedsHuman,
    ToolOutcomeUnknown,
)
from agentsaga.environment import read_secret
from agentsaga.v1 import sidecar_pb2 as pb
from agentsaga.v1 import sidecar_pb2_grpc as pb_grpc

__all__ = ["SYSTEM_PROMPT", "ApprovalRequired", "AsyncSagaClient", "PermissionDenied",
           "RateLimited", "Refused", "RunTakenOver", "SagaClient", "SettleResult", "SidecarLost",
           "StepUnresolved", "ToolCallError", "ToolFailed", "ToolNeedsHuman",
           "ToolOutcomeUnknown"]

R = TypeVar("R")

TOKEN_VARIABLE = "AGENTSAGA_ACCESS_TOKEN"


def access_token(token: str | None = None) -> str | None:
    """The pod's access token: `token` if given, else AGENTSAGA_ACCESS_TOKEN_FILE (or
    AGENTSAGA_ACCESS_TOKEN) of this process; None when none is configured (a loopback sidecar
    needs none)."""
    return token if token is not None else read_secret(os.environ, TOKEN_VARIABLE)


def auth_headers(token: str | None = None) -> dict[str, str]:
    """`authorization: Bearer <token>` when a token is configured, else nothing."""
    found = access_token(token)
    return {"authorization": f"Bearer {found}"} if found else {}

SYSTEM_PROMPT = """\
Tool calls with side effects go through a harness that records every call before it is made.
A tool result can say one of:
- CONFIRMED: it happened; the result is real.
- FAILED: the system refused; nothing happened. You may change the arguments and try again.
- OUTCOME UNKNOWN: the call may or may not have happened. Do NOT retry it with new or reworded
  arguments and do NOT assume it failed or succeeded. Call the same tool again; the harness checks
  the real system and returns what actually happened.
- STEP UNRESOLVED: an earlier call's outcome is still unknown; call that tool again first.
- NEEDS APPROVAL: a human must approve this step; include it in the plan you stage for approval.
- NEEDS HUMAN: only a person can find out whether that call happened. Do NOT call that tool
  again and do not work around it with other tools; tell the user what you were doing and end
  your turn.
Never report an action as done unless its result is CONFIRMED."""


class SagaClient:
    """Blocking client. `target` is host:port or unix:/path. With `tracing` (default: when this
    process records OpenTelemetry spans) each call carries `traceparent` to the sidecar. Each
    call carries the pod's access token (`token`, else AGENTSAGA_ACCESS_TOKEN_FILE) when one is
    configured: a sidecar on a non-loopback address requires it."""

    def __init__(self, target: str, *, timeout: float = 60.0,
                 tracing: bool | None = None, token: str | None = None) -> None:
        self.channel = telemetry.traced_channel(grpc.insecure_channel(target), tracing)
        self.stub = pb_grpc.SidecarStub(self.channel)
        self.timeout = timeout
        self.metadata = tuple(auth_headers(token).items())

    def _run(self, call: Call[R]) -> R:
        try:
            reply = getattr(self.stub, call.method)(call.request,
                                                    timeout=call.timeout or self.timeout,
                                                    metadata=self.metadata)
        except grpc.RpcError as exc:
            raise call.failure(exc) from exc
        return call.decode(reply)

    def close(self) -> None:
        self.channel.close()

    def __enter__(self) -> SagaClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def wait_ready(self, timeout: float = 10.0) -> None:
        """Block until the sidecar accepts connections (or raise after `timeout` seconds)."""
        grpc.channel_ready_future(self.channel).result(timeout=timeout)

    def begin_run(self, run_id: str, *, agent: str = "") -> pb.BeginRunResponse:
        return self._run(codec.begin_run(run_id, agent))

    def dispatch_raw(self, run_id: str, tool: str, args: dict[str, Any]) -> pb.DispatchResponse:
        """The sidecar's answer as it is (no outcome raised)."""
        return self._run(codec.dispatch_raw(run_id, tool, args))

    def dispatch(self, run_id: str, tool: str, args: dict[str, Any]) -> Any:
        """The tool's result when CONFIRMED; otherwise raises a ToolCallError subclass (also
        ToolOutcomeUnknown when the sidecar died, timed out or lost the run mid-call)."""
        return self._run(codec.dispatch(run_id, tool, args))

    def get_run(self, run_id: str) -> pb.GetRunResponse:
        return self._run(codec.get_run(run_id))

    def list_tools(self) -> list[pb.ToolInfo]:
        return self._run(codec.list_tools())

    def reconcile(self, run_id: str) -> SettleResult:
        return self._run(codec.reconcile(run_id))

    def unwind(self, run_id: str) -> SettleResult:
        return self._run(codec.unwind(run_id))

    def reach_pivot(self, run_id: str, commit_plan: list[dict[str, Any]]) -> pb.PivotResponse:
        return self._run(codec.reach_pivot(run_id, commit_plan))

    def await_decision(self, run_id: str, timeout: float = 300.0) -> pb.PivotResponse:
        """The pivot record once decided, or as it stands after `timeout` seconds."""
        return self._run(codec.await_decision(run_id, timeout))

    def end_run(self, run_id: str, outcome: str = "Succeeded") -> pb.EndRunResponse:
        return self._run(codec.end_run(run_id, outcome))


class AsyncSagaClient:
    """The asyncio variant of SagaClient (grpc.aio): the same methods and parameters."""

    def __init__(self, target: str, *, timeout: float = 60.0,
                 tracing: bool | None = None, token: str | None = None) -> None:
        self.channel = grpc.aio.insecure_channel(
            target, interceptors=telemetry.aio_client_interceptors(tracing))
        self.stub = pb_grpc.SidecarStub(self.channel)
        self.timeout = timeout
        self.metadata = tuple(auth_headers(token).items())

    async def _run(self, call: Call[R]) -> R:
        try:
            reply = await getattr(self.stub, call.method)(call.request,
                                                          timeout=call.timeout or self.timeout,
                                                          metadata=self.metadata)
        except grpc.RpcError as exc:
            raise call.failure(exc) from exc
        return call.decode(reply)

    async def close(self) -> None:
        await self.channel.close()

    async def __aenter__(self) -> AsyncSagaClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # `timeout` as in SagaClient: one set of names and parameters for both shells
    async def wait_ready(self, timeout: float = 10.0) -> None:  # noqa: ASYNC109
        """Wait until the sidecar accepts connections (or raise after `timeout` seconds)."""
        import asyncio

        await asyncio.wait_for(self.channel.channel_ready(), timeout)

    async def begin_run(self, run_id: str, *, agent: str = "") -> pb.BeginRunResponse:
        return await self._run(codec.begin_run(run_id, agent))

    async def dispatch_raw(self, run_id: str, tool: str,
                           args: dict[str, Any]) -> pb.DispatchResponse:
        """The sidecar's answer as it is (no outcome raised)."""
        return await self._run(codec.dispatch_raw(run_id, tool, args))

    async def dispatch(self, run_id: str, tool: str, args: dict[str, Any]) -> Any:
        """The tool's result when CONFIRMED; otherwise raises a ToolCallError subclass."""
        return await self._run(codec.dispatch(run_id, tool, args))

    async def get_run(self, run_id: str) -> pb.GetRunResponse:
        return await self._run(codec.get_run(run_id))

    async def list_tools(self) -> list[pb.ToolInfo]:
        return await self._run(codec.list_tools())

    async def reconcile(self, run_id: str) -> SettleResult:
        return await self._run(codec.reconcile(run_id))

    async def unwind(self, run_id: str) -> SettleResult:
        return await self._run(codec.unwind(run_id))

    async def reach_pivot(self, run_id: str,
                          commit_plan: list[dict[str, Any]]) -> pb.PivotResponse:
        return await self._run(codec.reach_pivot(run_id, commit_plan))

    async def await_decision(self, run_id: str,
                             timeout: float = 300.0) -> pb.PivotResponse:  # noqa: ASYNC109
        """The pivot record once decided, or as it stands after `timeout` seconds (how long
        the sidecar waits, as in SagaClient)."""
        return await self._run(codec.await_decision(run_id, timeout))

    async def end_run(self, run_id: str, outcome: str = "Succeeded") -> pb.EndRunResponse:
        return await self._run(codec.end_run(run_id, outcome))
