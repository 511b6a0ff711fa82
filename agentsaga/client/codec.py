"""One encoding of every request and one decoding of every answer, for both client shells:
each method of the client is a `Call` (which RPC, its request, its timeout, how to read the
reply, how to read a failure); `SagaClient` runs it blocking, `AsyncSagaClient` awaits it."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import grpc

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
from agentsaga.errors import ErrorCode
from agentsaga.v1 import sidecar_pb2 as pb

R = TypeVar("R")


@dataclass(frozen=True)
class SettleResult:
    report: dict[str, Any]
    settled: bool


def _same(reply: Any) -> Any:
    return reply


@dataclass(frozen=True)
class Call(Generic[R]):
    method: str
    """The stub's RPC (e.g. "Dispatch")."""
    request: Any
    decode: Callable[[Any], R]
    timeout: float | None = None
    """None: the client's default timeout."""
    in_a_tool_call: bool = False
    """A lost sidecar means the outcome is unknown (Dispatch), not a refusal."""

    def failure(self, exc: grpc.RpcError) -> Exception:
        return failure(exc, in_a_tool_call=self.in_a_tool_call)


# -- the calls ---------------------------------------------------------------------------------


def begin_run(run_id: str, agent: str) -> Call[pb.BeginRunResponse]:
    return Call("BeginRun", pb.BeginRunRequest(run_id=run_id, agent=agent), _same)


def dispatch_raw(run_id: str, tool: str, args: dict[str, Any]) -> Call[pb.DispatchResponse]:
    """The answer as it is; a failed RPC raises with its gRPC status (the caller reads it)."""
    request = pb.DispatchRequest(run_id=run_id, tool=tool, args_json=json.dumps(args))
    return Call("Dispatch", request, _same)


def dispatch(run_id: str, tool: str, args: dict[str, Any]) -> Call[Any]:
    request = pb.DispatchRequest(run_id=run_id, tool=tool, args_json=json.dumps(args))
    return Call("Dispatch", request, tool_result, in_a_tool_call=True)


def get_run(run_id: str) -> Call[pb.GetRunResponse]:
    return Call("GetRun", pb.GetRunRequest(run_id=run_id), _same)


def list_tools() -> Call[list[pb.ToolInfo]]:
    return Call("ListTools", pb.ListToolsRequest(), lambda reply: list(reply.tools))


def reconcile(run_id: str) -> Call[SettleResult]:
    return Call("Reconcile", pb.RunRequest(run_id=run_id), settle_result)


def unwind(run_id: str) -> Call[SettleResult]:
    return Call("Unwind", pb.RunRequest(run_id=run_id), settle_result)


def reach_pivot(run_id: str, commit_plan: list[dict[str, Any]]) -> Call[pb.PivotResponse]:
    return Call("ReachPivot", pb.ReachPivotRequest(run_id=run_id,
                                                   commit_plan_json=json.dumps(commit_plan)),
                _same)


def await_decision(run_id: str, timeout: float) -> Call[pb.PivotResponse]:
    """The pivot record once decided, or as it stands after `timeout` seconds (the RPC itself
    may take 10 s longer)."""
    return Call("AwaitDecision", pb.AwaitDecisionRequest(run_id=run_id, timeout_seconds=timeout),
                _same, timeout=timeout + 10)


def end_run(run_id: str, outcome: str) -> Call[pb.EndRunResponse]:
    return Call("EndRun", pb.EndRunRequest(run_id=run_id, outcome=outcome), _same)


# -- answers -----------------------------------------------------------------------------------


_RAISE: dict[int, type[ToolCallError]] = {
    pb.UNKNOWN: ToolOutcomeUnknown,
    pb.FAILED: ToolFailed,
    pb.STEP_UNRESOLVED: StepUnresolved,
    pb.NEEDS_APPROVAL: ApprovalRequired,
    pb.NEEDS_HUMAN: ToolNeedsHuman,
}


def tool_result(response: pb.DispatchResponse) -> Any:
    """The tool's result when CONFIRMED; otherwise the ToolCallError the outcome means."""
    if response.outcome == pb.CONFIRMED:
        return json.loads(response.result_json) if response.result_json else None
    kind = _RAISE.get(response.outcome, ToolCallError)
    raise kind(response.message or pb.Outcome.Name(response.outcome), response)


def settle_result(reply: pb.SettleReport) -> SettleResult:
    return SettleResult(json.loads(reply.report_json or "{}"), reply.settled)


# The sidecar died, timed out or broke mid-call: the call may have happened.
_MAYBE_HAPPENED = frozenset({
    grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.INTERNAL,
    grpc.StatusCode.CANCELLED, grpc.StatusCode.UNKNOWN,
})

ERROR_CODES: dict[grpc.StatusCode, ErrorCode] = {
    grpc.StatusCode.NOT_FOUND: ErrorCode.NOT_FOUND,
    grpc.StatusCode.INVALID_ARGUMENT: ErrorCode.INVALID_ARGUMENT,
    grpc.StatusCode.FAILED_PRECONDITION: ErrorCode.FAILED_PRECONDITION,
    grpc.StatusCode.PERMISSION_DENIED: ErrorCode.PERMISSION_DENIED,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ErrorCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.ABORTED: ErrorCode.TAKEN_OVER,
    grpc.StatusCode.UNAVAILABLE: ErrorCode.UNAVAILABLE,
    grpc.StatusCode.UNKNOWN: ErrorCode.UNKNOWN,
}
"""What kind of refusal each gRPC status of the sidecar is: its STATUS table read back (a test
checks that they agree)."""


def maybe_happened(code: grpc.StatusCode) -> bool:
    """Whether a tool call that ended with this status may have happened all the same."""
    return code in _MAYBE_HAPPENED


_REFUSED: dict[grpc.StatusCode, type[Refused]] = {
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.RESOURCE_EXHAUSTED: RateLimited,
}


def failure(exc: grpc.RpcError, *, in_a_tool_call: bool) -> Exception:
    """A gRPC failure as the agent should read it: SidecarLost when a tool call may have
    happened, RunTakenOver when another owner adopted the run (R12), and a Refused for
    requests the sidecar refused (nothing happened)."""
    call: Any = exc  # a grpc.Call in practice: code() and details()
    code: grpc.StatusCode = (call.code() if callable(getattr(call, "code", None))
                             else grpc.StatusCode.UNKNOWN)
    details = str(call.details() if callable(getattr(call, "details", None)) else exc)
    if code is grpc.StatusCode.ABORTED:
        return RunTakenOver(details, pb.DispatchResponse(message=details))
    if in_a_tool_call and code in _MAYBE_HAPPENED:
        message = (f"outcome unknown: the sidecar answered {code.name} ({details}). Do not "
                   "retry with new arguments; call the same tool again once the sidecar is "
                   "back, and it will resolve what happened.")
        return SidecarLost(message, pb.DispatchResponse(outcome=pb.UNKNOWN, message=message))
    return _REFUSED.get(code, Refused)(code, details)
