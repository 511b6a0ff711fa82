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
    └── ApprovalRequired     a human must approve this at the pivot

Put SYSTEM_PROMPT (below) in the model's system prompt so that it reads these the same way the
harness enforces them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import grpc

from agentsaga import telemetry
from agentsaga.v1 import sidecar_pb2 as pb
from agentsaga.v1 import sidecar_pb2_grpc as pb_grpc

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
Never report an action as done unless its result is CONFIRMED."""


class ToolCallError(Exception):
    """A tool call that did not confirm; `response` is the sidecar's answer."""

    def __init__(self, message: str, response: pb.DispatchResponse) -> None:
        super().__init__(message)
        self.response = response

    @property
    def step_idx(self) -> int:
        return self.response.step_idx

    @property
    def idempotency_key(self) -> str:
        return self.response.idempotency_key


class ToolOutcomeUnknown(ToolCallError):
    pass


class SidecarLost(ToolOutcomeUnknown):
    """The sidecar died, timed out or broke during the call: the outcome is unknown."""


class RunTakenOver(ToolCallError):
    """Another owner adopted the run (a resumed pod, an unwind Job): this agent must stop."""


class ToolFailed(ToolCallError):
    pass


class StepUnresolved(ToolCallError):
    pass


class ApprovalRequired(ToolCallError):
    pass


_RAISE: dict[int, type[ToolCallError]] = {
    pb.UNKNOWN: ToolOutcomeUnknown,
    pb.FAILED: ToolFailed,
    pb.STEP_UNRESOLVED: StepUnresolved,
    pb.NEEDS_APPROVAL: ApprovalRequired,
}


# The sidecar died, timed out or broke mid-call: the call may have happened.
_MAYBE_HAPPENED = frozenset({
    grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.INTERNAL,
    grpc.StatusCode.CANCELLED, grpc.StatusCode.UNKNOWN,
})


def _transport_failure(exc: grpc.RpcError) -> Exception:
    """A gRPC failure as the agent should read it: SidecarLost when the call may have
    happened, RunTakenOver when another owner adopted the run (R12), and the RpcError itself
    for requests the sidecar refused (nothing happened)."""
    call: Any = exc  # a grpc.Call in practice: code() and details()
    code: grpc.StatusCode | None = call.code() if callable(getattr(call, "code", None)) else None
    details = call.details() if callable(getattr(call, "details", None)) else str(exc)
    if code is grpc.StatusCode.ABORTED:
        return RunTakenOver(str(details), pb.DispatchResponse(message=str(details)))
    if code not in _MAYBE_HAPPENED:
        return call  # type: ignore[no-any-return]
    message = (f"outcome unknown: the sidecar answered {code.name if code else '?'} "
               f"({details}). Do not retry with new arguments; call the same tool again once "
               "the sidecar is back, and it will resolve what happened.")
    return SidecarLost(message, pb.DispatchResponse(outcome=pb.UNKNOWN, message=message))


def _result(response: pb.DispatchResponse) -> Any:
    if response.outcome == pb.CONFIRMED:
        return json.loads(response.result_json) if response.result_json else None
    kind = _RAISE.get(response.outcome, ToolCallError)
    raise kind(response.message or pb.Outcome.Name(response.outcome), response)


@dataclass(frozen=True)
class SettleResult:
    report: dict[str, Any]
    settled: bool


class SagaClient:
    """Blocking client. `target` is host:port or unix:/path. With `tracing` (default: when this
    process records OpenTelemetry spans) each call carries `traceparent` to the sidecar."""

    def __init__(self, target: str, *, timeout: float = 60.0,
                 tracing: bool | None = None) -> None:
        self.channel = telemetry.traced_channel(grpc.insecure_channel(target), tracing)
        self.stub = pb_grpc.SidecarStub(self.channel)
        self.timeout = timeout

    def close(self) -> None:
        self.channel.close()

    def __enter__(self) -> SagaClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def wait_ready(self, timeout: float = 10.0) -> None:
        grpc.channel_ready_future(self.channel).result(timeout=timeout)

    def begin_run(self, run_id: str, *, agent: str = "") -> pb.BeginRunResponse:
        reply: pb.BeginRunResponse = self.stub.BeginRun(
            pb.BeginRunRequest(run_id=run_id, agent=agent), timeout=self.timeout
        )
        return reply

    def dispatch_raw(self, run_id: str, tool: str, args: dict[str, Any]) -> pb.DispatchResponse:
        request = pb.DispatchRequest(run_id=run_id, tool=tool, args_json=json.dumps(args))
        reply: pb.DispatchResponse = self.stub.Dispatch(request, timeout=self.timeout)
        return reply

    def dispatch(self, run_id: str, tool: str, args: dict[str, Any]) -> Any:
        """The tool's result when CONFIRMED; otherwise raises a ToolCallError subclass (also
        ToolOutcomeUnknown when the sidecar died, timed out or lost the run mid-call)."""
        try:
            response = self.dispatch_raw(run_id, tool, args)
        except grpc.RpcError as exc:
            raise _transport_failure(exc) from exc
        return _result(response)

    def get_run(self, run_id: str) -> pb.GetRunResponse:
        reply: pb.GetRunResponse = self.stub.GetRun(
            pb.GetRunRequest(run_id=run_id), timeout=self.timeout
        )
        return reply

    def list_tools(self) -> list[pb.ToolInfo]:
        return list(self.stub.ListTools(pb.ListToolsRequest(), timeout=self.timeout).tools)

    def reconcile(self, run_id: str) -> SettleResult:
        reply = self.stub.Reconcile(pb.RunRequest(run_id=run_id), timeout=self.timeout)
        return SettleResult(json.loads(reply.report_json or "{}"), reply.settled)

    def unwind(self, run_id: str) -> SettleResult:
        reply = self.stub.Unwind(pb.RunRequest(run_id=run_id), timeout=self.timeout)
        return SettleResult(json.loads(reply.report_json or "{}"), reply.settled)

    def reach_pivot(self, run_id: str, commit_plan: list[dict[str, Any]]) -> pb.PivotResponse:
        reply: pb.PivotResponse = self.stub.ReachPivot(
            pb.ReachPivotRequest(run_id=run_id, commit_plan_json=json.dumps(commit_plan)),
            timeout=self.timeout,
        )
        return reply

    def await_decision(self, run_id: str, timeout: float = 300.0) -> pb.PivotResponse:
        reply: pb.PivotResponse = self.stub.AwaitDecision(
            pb.AwaitDecisionRequest(run_id=run_id, timeout_seconds=timeout), timeout=timeout + 10
        )
        return reply

    def end_run(self, run_id: str, outcome: str = "Succeeded") -> pb.EndRunResponse:
        reply: pb.EndRunResponse = self.stub.EndRun(
            pb.EndRunRequest(run_id=run_id, outcome=outcome), timeout=self.timeout
        )
        return reply


class AsyncSagaClient:
    """asyncio variant of SagaClient (grpc.aio)."""

    def __init__(self, target: str, *, timeout: float = 60.0,
                 tracing: bool | None = None) -> None:
        self.channel = grpc.aio.insecure_channel(
            target, interceptors=telemetry.aio_client_interceptors(tracing))
        self.stub = pb_grpc.SidecarStub(self.channel)
        self.timeout = timeout

    async def close(self) -> None:
        await self.channel.close()

    async def begin_run(self, run_id: str, *, agent: str = "") -> pb.BeginRunResponse:
        reply: pb.BeginRunResponse = await self.stub.BeginRun(
            pb.BeginRunRequest(run_id=run_id, agent=agent), timeout=self.timeout
        )
        return reply

    async def dispatch_raw(
        self, run_id: str, tool: str, args: dict[str, Any]
    ) -> pb.DispatchResponse:
        request = pb.DispatchRequest(run_id=run_id, tool=tool, args_json=json.dumps(args))
        reply: pb.DispatchResponse = await self.stub.Dispatch(request, timeout=self.timeout)
        return reply

    async def dispatch(self, run_id: str, tool: str, args: dict[str, Any]) -> Any:
        try:
            response = await self.dispatch_raw(run_id, tool, args)
        except grpc.RpcError as exc:
            raise _transport_failure(exc) from exc
        return _result(response)

    async def get_run(self, run_id: str) -> pb.GetRunResponse:
        reply: pb.GetRunResponse = await self.stub.GetRun(
            pb.GetRunRequest(run_id=run_id), timeout=self.timeout
        )
        return reply

    async def end_run(self, run_id: str, outcome: str = "Succeeded") -> pb.EndRunResponse:
        reply: pb.EndRunResponse = await self.stub.EndRun(
            pb.EndRunRequest(run_id=run_id, outcome=outcome), timeout=self.timeout
        )
        return reply

    async def list_tools(self) -> list[pb.ToolInfo]:
        reply = await self.stub.ListTools(pb.ListToolsRequest(), timeout=self.timeout)
        return list(reply.tools)

    async def reconcile(self, run_id: str) -> SettleResult:
        reply = await self.stub.Reconcile(pb.RunRequest(run_id=run_id), timeout=self.timeout)
        return SettleResult(json.loads(reply.report_json or "{}"), reply.settled)

    async def unwind(self, run_id: str) -> SettleResult:
        reply = await self.stub.Unwind(pb.RunRequest(run_id=run_id), timeout=self.timeout)
        return SettleResult(json.loads(reply.report_json or "{}"), reply.settled)

    async def reach_pivot(self, run_id: str,
                          commit_plan: list[dict[str, Any]]) -> pb.PivotResponse:
        reply: pb.PivotResponse = await self.stub.ReachPivot(
            pb.ReachPivotRequest(run_id=run_id, commit_plan_json=json.dumps(commit_plan)),
            timeout=self.timeout)
        return reply

    async def await_decision(self, run_id: str, wait_s: float = 300.0) -> pb.PivotResponse:
        """The pivot record once decided, or as it stands after `wait_s` seconds."""
        reply: pb.PivotResponse = await self.stub.AwaitDecision(
            pb.AwaitDecisionRequest(run_id=run_id, timeout_seconds=wait_s),
            timeout=wait_s + 10)
        return reply
