"""The gRPC front end: request -> `SagaService` call -> response, nothing more.

Tool outcomes travel in responses; a refused request becomes a status code whose message says
what was wrong and what to do. Errors are mapped once, here, by one table from the code each
error class declares (`agentsaga.errors.ErrorCode`) to a gRPC status.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable
from typing import Any, NoReturn, Protocol, TypeVar

import grpc

from agentsaga.calls import BeganRun, DispatchResult, RunView
from agentsaga.errors import ErrorCode, SagaError
from agentsaga.saga import pivot
from agentsaga.saga.resolution_report import ResolutionReport
from agentsaga.service.saga_service import SagaService
from agentsaga.store import PivotRecord, Step
from agentsaga.v1 import sidecar_pb2 as pb
from agentsaga.v1 import sidecar_pb2_grpc as pb_grpc

logger = logging.getLogger(__name__)

STATUS: dict[ErrorCode, grpc.StatusCode] = {
    ErrorCode.NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    ErrorCode.INVALID_ARGUMENT: grpc.StatusCode.INVALID_ARGUMENT,
    ErrorCode.FAILED_PRECONDITION: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorCode.PERMISSION_DENIED: grpc.StatusCode.PERMISSION_DENIED,
    ErrorCode.RESOURCE_EXHAUSTED: grpc.StatusCode.RESOURCE_EXHAUSTED,
    ErrorCode.TAKEN_OVER: grpc.StatusCode.ABORTED,
    ErrorCode.UNAVAILABLE: grpc.StatusCode.UNAVAILABLE,
    ErrorCode.UNKNOWN: grpc.StatusCode.UNKNOWN,
}
"""Every ErrorCode's gRPC status (a test checks that none is missing)."""


RETRY_AFTER_KEY = "agentsaga-retry-after-s"
"""Trailing metadata of a RESOURCE_EXHAUSTED answer that knows when to call again: seconds (also
sent as google.rpc.RetryInfo in grpc-status-details-bin, the standard rich error model)."""


class Aborting(Protocol):
    """The part of grpc.ServicerContext the adapter uses: `abort` ends the RPC by raising;
    `is_active` says whether the client is still there; `set_trailing_metadata` carries the
    retry information of a refusal."""

    def abort(self, code: grpc.StatusCode, details: str) -> NoReturn: ...

    def is_active(self) -> bool: ...

    def set_trailing_metadata(self, trailing_metadata: Any) -> None: ...


def retry_metadata(code: grpc.StatusCode, message: str,
                   retry_after_s: float) -> tuple[tuple[str, str | bytes], ...]:
    """The trailing metadata of a refusal to retry after `retry_after_s`: the seconds, and a
    google.rpc.Status whose details hold a google.rpc.RetryInfo (what gRPC clients that read
    the rich error model, e.g. grpc_status.rpc_status.from_call, find)."""
    from google.protobuf import any_pb2, duration_pb2
    from google.rpc import error_details_pb2, status_pb2

    delay = duration_pb2.Duration()
    delay.FromMilliseconds(int(retry_after_s * 1000))
    detail = any_pb2.Any()
    detail.Pack(error_details_pb2.RetryInfo(retry_delay=delay))
    status = status_pb2.Status(code=code.value[0], message=message, details=[detail])
    return ((RETRY_AFTER_KEY, f"{retry_after_s:g}"),
            ("grpc-status-details-bin", status.SerializeToString()))


Req = TypeVar("Req")
Resp = TypeVar("Resp")


def rpc(method: Callable[[Any, Req, Aborting], Resp]
        ) -> Callable[[Any, Req, Aborting], Resp]:
    """An RPC within the request rate limits (per run, total), whose errors are answered by the
    table: a SagaError by its code, anything else (a bug) as INTERNAL without internals."""
    @functools.wraps(method)
    def answer(self: SidecarServicer, request: Req, context: Aborting) -> Resp:
        try:
            self.service.admit_request(str(getattr(request, "run_id", "") or ""))
            return method(self, request, context)
        except SagaError as exc:
            code = STATUS[exc.error_code]
            retry_after: float | None = getattr(exc, "retry_after_s", None)
            if retry_after is not None:
                context.set_trailing_metadata(retry_metadata(code, str(exc), retry_after))
            context.abort(code, str(exc))
        except Exception as exc:
            logger.exception("%s failed", method.__name__)
            context.abort(grpc.StatusCode.INTERNAL,
                          f"{method.__name__} failed: {type(exc).__name__}")
    return answer


class SidecarServicer(pb_grpc.SidecarServicer):
    def __init__(self, service: SagaService) -> None:
        self.service = service

    @rpc
    def BeginRun(self, request: pb.BeginRunRequest, context: Aborting) -> pb.BeginRunResponse:
        # the pod's identity comes from the downward API (the sidecar's settings) only; the
        # request's pod_name, pod_uid and namespace are deprecated and ignored
        return began_message(self.service.begin_run(request.run_id, agent=request.agent))

    @rpc
    def Dispatch(self, request: pb.DispatchRequest, context: Aborting) -> pb.DispatchResponse:
        return dispatch_message(self.service.dispatch_request(
            request.run_id, request.tool, request.args_json))

    @rpc
    def GetRun(self, request: pb.GetRunRequest, context: Aborting) -> pb.GetRunResponse:
        return run_message(self.service.get_run(request.run_id))

    @rpc
    def ListTools(self, request: pb.ListToolsRequest, context: Aborting) -> pb.ListToolsResponse:
        return pb.ListToolsResponse(tools=[
            pb.ToolInfo(name=t.name, tool_class=t.tool_class, description=t.description,
                        has_lookup=t.has_lookup, has_compensation=t.has_compensation,
                        input_schema_json=json.dumps(t.input_schema))
            for t in self.service.list_tools()])

    @rpc
    def EndRun(self, request: pb.EndRunRequest, context: Aborting) -> pb.EndRunResponse:
        run = self.service.end_run(request.run_id, request.outcome)
        return pb.EndRunResponse(run_id=run.run_id, state=str(run.state))

    @rpc
    def Reconcile(self, request: pb.RunRequest, context: Aborting) -> pb.SettleReport:
        return report_message(self.service.reconcile(request.run_id))

    @rpc
    def Unwind(self, request: pb.RunRequest, context: Aborting) -> pb.SettleReport:
        return report_message(self.service.unwind(request.run_id))

    @rpc
    def ReachPivot(self, request: pb.ReachPivotRequest, context: Aborting) -> pb.PivotResponse:
        return pivot_message(request.run_id, self.service.reach_pivot_request(
            request.run_id, request.commit_plan_json))

    @rpc
    def AwaitDecision(self, request: pb.AwaitDecisionRequest,
                      context: Aborting) -> pb.PivotResponse:
        # capped (AGENTSAGA_AWAIT_DECISION_MAX_S), and over as soon as the client goes
        record = self.service.await_decision(request.run_id, request.timeout_seconds or 30.0,
                                             gone=lambda: not context.is_active())
        return pivot_message(request.run_id, record)


# -- messages --------------------------------------------------------------------------------


def _dumps(value: Any) -> str:
    return "" if value is None else json.dumps(value, default=str)


def began_message(began: BeganRun) -> pb.BeginRunResponse:
    return pb.BeginRunResponse(run_id=began.run.run_id, owner_epoch=began.run.owner_epoch,
                               adopted=began.adopted, next_step=began.next_step)


def dispatch_message(out: DispatchResult) -> pb.DispatchResponse:
    return pb.DispatchResponse(
        outcome=pb.Outcome.Value(str(out.outcome)), step_idx=out.step_idx,
        idempotency_key=out.key, result_json=_dumps(out.result),
        external_ref=out.external_ref or "", message=out.message, status=str(out.status),
        retry_after_s=out.retry_after_s)


def step_message(step: Step) -> pb.Step:
    return pb.Step(
        step_idx=step.step_idx, tool=step.tool, tool_class=step.tool_class,
        idempotency_key=step.idempotency_key, status=str(step.status),
        args_json=_dumps(step.args), result_json=_dumps(step.result),
        external_ref=step.external_ref or "", compensation_json=_dumps(step.compensation),
        audience=step.audience, error=step.error or "",
        created_at=step.created_at.isoformat(), updated_at=step.updated_at.isoformat(),
    )


def run_message(view: RunView) -> pb.GetRunResponse:
    run = view.run
    return pb.GetRunResponse(
        run_id=run.run_id, state=str(run.state), owner_epoch=run.owner_epoch,
        irreversible_before_pivot=run.irreversible_before_pivot,
        steps=[step_message(s) for s in view.steps],
        pivot_json=_dumps(None if run.pivot is None else pivot.shown(run.pivot)))


def report_message(report: ResolutionReport) -> pb.SettleReport:
    return pb.SettleReport(run_id=report.run_id, report_json=_dumps(report.to_json()),
                           settled=report.settled)


def pivot_message(run_id: str, record: PivotRecord | None) -> pb.PivotResponse:
    if record is None:
        return pb.PivotResponse(run_id=run_id, pivot_json=_dumps({}))
    return pb.PivotResponse(run_id=run_id, state=str(record.state), plan_hash=record.plan_hash,
                            pivot_json=_dumps(pivot.shown(record)))
