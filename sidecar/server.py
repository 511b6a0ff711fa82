"""The gRPC servicer: translates between `agentsaga.v1` messages and the Dispatcher.

Errors are translated here, once: tool outcomes travel in responses; protocol problems become
status codes whose messages say what was wrong and what to do.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from concurrent import futures
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, NoReturn

import grpc
import psycopg
from agentsaga.sidecar.limits import RunRateLimiter
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from agentsaga import errors, telemetry
from agentsaga.dispatch import Dispatcher, DispatchResult, check_run_id, parse_args
from agentsaga.log import Step
from agentsaga.v1 import sidecar_pb2 as pb
from agentsaga.v1 import sidecar_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["Sidecar"].full_name

# The order matters: subclasses before their parents.
_STATUS: tuple[tuple[type[Exception], grpc.StatusCode], ...] = (
    (errors.UnknownTool, grpc.StatusCode.NOT_FOUND),
    (errors.InvalidArguments, grpc.StatusCode.INVALID_ARGUMENT),
    (errors.InvalidRunId, grpc.StatusCode.INVALID_ARGUMENT),
    (errors.RunEnded, grpc.StatusCode.FAILED_PRECONDITION),
    (errors.RunNotFound, grpc.StatusCode.FAILED_PRECONDITION),
    (errors.CompensationUnavailable, grpc.StatusCode.FAILED_PRECONDITION),
    (errors.PermissionDenied, grpc.StatusCode.PERMISSION_DENIED),
    (errors.RateLimited, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (errors.Fenced, grpc.StatusCode.ABORTED),
    (errors.DatabaseUnavailable, grpc.StatusCode.UNAVAILABLE),
    (errors.ConfigurationError, grpc.StatusCode.FAILED_PRECONDITION),
    (errors.SagaError, grpc.StatusCode.FAILED_PRECONDITION),
    (psycopg.OperationalError, grpc.StatusCode.UNAVAILABLE),
)


def _status_for(exc: Exception) -> grpc.StatusCode:
    for kind, code in _STATUS:
        if isinstance(exc, kind):
            return code
    return grpc.StatusCode.INTERNAL


@contextmanager
def _edge(context: grpc.ServicerContext, what: str) -> Iterator[None]:
    try:
        yield
    except (errors.SagaError, psycopg.Error) as exc:
        code = _status_for(exc)
        message = str(exc)
        if code is grpc.StatusCode.UNAVAILABLE:
            message = f"the saga log (Postgres) is unreachable: {exc}; nothing was called"
        _abort(context, code, message)
    except Exception as exc:  # a bug: say so without leaking internals
        log.exception("%s failed", what)
        _abort(context, grpc.StatusCode.INTERNAL, f"{what} failed: {type(exc).__name__}")


def _abort(context: grpc.ServicerContext, code: grpc.StatusCode, message: str) -> NoReturn:
    context.abort(code, message)
    raise AssertionError("unreachable")  # context.abort raises


def _dumps(value: Any) -> str:
    return "" if value is None else json.dumps(value, default=str)


def step_message(step: Step) -> pb.Step:
    return pb.Step(
        step_idx=step.step_idx, tool=step.tool, tool_class=step.tool_class,
        idempotency_key=step.idempotency_key, status=step.status,
        args_json=_dumps(step.args), result_json=_dumps(step.result),
        external_ref=step.external_ref or "", compensation_json=_dumps(step.compensation),
        audience=step.audience, error=step.error or "",
        created_at=step.created_at.isoformat(), updated_at=step.updated_at.isoformat(),
    )


@dataclass
class Extensions:
    """RPCs served by other parts of the product, plugged in by `agentsaga.sidecar.main`."""

    reconcile: Callable[[str], tuple[dict[str, Any], bool]] | None = None
    unwind: Callable[[str], tuple[dict[str, Any], bool]] | None = None
    reach_pivot: Callable[[str, list[dict[str, Any]]], dict[str, Any]] | None = None
    await_decision: Callable[[str, float], dict[str, Any]] | None = None
    on_begin: Callable[[str, str, bool], None] | None = None


class SidecarServicer(pb_grpc.SidecarServicer):
    def __init__(self, dispatcher: Dispatcher, extensions: Extensions | None = None) -> None:
        self.dispatcher = dispatcher
        self.ext = extensions or Extensions()
        self.limiter = RunRateLimiter(dispatcher.settings.max_calls_per_s)

    def BeginRun(self, request: pb.BeginRunRequest,
                 context: grpc.ServicerContext) -> pb.BeginRunResponse:
        with _edge(context, "BeginRun"):
            run, adopted = self.dispatcher.begin_run(
                request.run_id, agent=request.agent, owner=request.pod_name,
                pod_uid=request.pod_uid, namespace=request.namespace)
            if self.ext.on_begin is not None:
                self.ext.on_begin(run.run_id, run.agent, adopted)
            newest = self.dispatcher.log.newest_step(run.run_id)
            return pb.BeginRunResponse(run_id=run.run_id, owner_epoch=run.owner_epoch,
                                       adopted=adopted,
                                       next_step=0 if newest is None else newest.step_idx + 1)
        raise AssertionError("unreachable")

    def Dispatch(self, request: pb.DispatchRequest,
                 context: grpc.ServicerContext) -> pb.DispatchResponse:
        with _edge(context, "Dispatch"):
            check_run_id(request.run_id)
            self.limiter.take(request.run_id)
            args = parse_args(request.args_json, self.dispatcher.settings.max_args_bytes)
            out = self.dispatcher.dispatch(request.run_id, request.tool, args)
            _log_outcome(request, out)
            return pb.DispatchResponse(
                outcome=pb.Outcome.Value(out.outcome), step_idx=out.step_idx,
                idempotency_key=out.key, result_json=_dumps(out.result),
                external_ref=out.external_ref or "", message=out.message, status=out.status)
        raise AssertionError("unreachable")

    def GetRun(self, request: pb.GetRunRequest,
               context: grpc.ServicerContext) -> pb.GetRunResponse:
        with _edge(context, "GetRun"):
            check_run_id(request.run_id)
            run = self.dispatcher.log.require_run(request.run_id)
            self.dispatcher.check_bound(run)
            steps = self.dispatcher.log.steps(run.run_id)
            return pb.GetRunResponse(
                run_id=run.run_id, state=run.state, owner_epoch=run.owner_epoch,
                irreversible_before_pivot=run.irreversible_before_pivot,
                steps=[step_message(s) for s in steps], pivot_json=_dumps(run.pivot))
        raise AssertionError("unreachable")

    def ListTools(self, request: pb.ListToolsRequest,
                  context: grpc.ServicerContext) -> pb.ListToolsResponse:
        return pb.ListToolsResponse(tools=[
            pb.ToolInfo(name=s.name, tool_class=s.cls, description=s.description,
                        has_lookup=s.lookup is not None, has_compensation=s.compensate is not None)
            for s in self.dispatcher.registry
        ])

    def EndRun(self, request: pb.EndRunRequest,
               context: grpc.ServicerContext) -> pb.EndRunResponse:
        with _edge(context, "EndRun"):
            outcome = request.outcome or "Succeeded"
            if outcome not in ("Succeeded", "Failed"):
                raise errors.InvalidArguments(f"outcome {outcome!r}: use Succeeded or Failed")
            run = self.dispatcher.end_run(request.run_id, outcome.lower())
            return pb.EndRunResponse(run_id=run.run_id, state=run.state)
        raise AssertionError("unreachable")

    def _settle(self, request: pb.RunRequest, context: grpc.ServicerContext, what: str,
                fn: Callable[[str], tuple[dict[str, Any], bool]] | None) -> pb.SettleReport:
        if fn is None:
            _abort(context, grpc.StatusCode.UNIMPLEMENTED, f"{what} is not enabled here")
        with _edge(context, what):
            check_run_id(request.run_id)
            report, settled = fn(request.run_id)
            return pb.SettleReport(run_id=request.run_id, report_json=_dumps(report),
                                   settled=settled)
        raise AssertionError("unreachable")

    def Reconcile(self, request: pb.RunRequest,
                  context: grpc.ServicerContext) -> pb.SettleReport:
        return self._settle(request, context, "Reconcile", self.ext.reconcile)

    def Unwind(self, request: pb.RunRequest, context: grpc.ServicerContext) -> pb.SettleReport:
        return self._settle(request, context, "Unwind", self.ext.unwind)

    def ReachPivot(self, request: pb.ReachPivotRequest,
                   context: grpc.ServicerContext) -> pb.PivotResponse:
        if self.ext.reach_pivot is None:
            _abort(context, grpc.StatusCode.UNIMPLEMENTED, "the pivot is not enabled here")
        with _edge(context, "ReachPivot"):
            check_run_id(request.run_id)
            plan = json.loads(request.commit_plan_json or "[]")
            if not isinstance(plan, list) or not all(isinstance(s, dict) for s in plan):
                raise errors.InvalidArguments(
                    'commit_plan_json must be a JSON list of {"tool": ..., "args": {...}}')
            return _pivot_response(request.run_id, self.ext.reach_pivot(request.run_id, plan))
        raise AssertionError("unreachable")

    def AwaitDecision(self, request: pb.AwaitDecisionRequest,
                      context: grpc.ServicerContext) -> pb.PivotResponse:
        if self.ext.await_decision is None:
            _abort(context, grpc.StatusCode.UNIMPLEMENTED, "the pivot is not enabled here")
        with _edge(context, "AwaitDecision"):
            check_run_id(request.run_id)
            timeout = request.timeout_seconds or 30.0
            return _pivot_response(request.run_id,
                                   self.ext.await_decision(request.run_id, timeout))
        raise AssertionError("unreachable")


def _log_outcome(request: pb.DispatchRequest, out: DispatchResult) -> None:
    """One line per call that did not simply happen (INFO), or per call (DEBUG, --verbose);
    with the run, step, tool and key (`agentsaga.logformat`)."""
    level = logging.DEBUG if out.outcome == "CONFIRMED" else logging.INFO
    if log.isEnabledFor(level):
        log.log(level, "%s%s", out.outcome, f": {out.message}" if out.message else "",
                extra={"run_id": request.run_id, "step": out.step_idx, "tool": request.tool,
                       "key": out.key})


def _pivot_response(run_id: str, record: dict[str, Any]) -> pb.PivotResponse:
    return pb.PivotResponse(run_id=run_id, state=str(record.get("state", "")),
                            plan_hash=str(record.get("planHash", "")), pivot_json=_dumps(record))


def _bind_failure(listen: str) -> str:
    if listen.startswith("unix:"):
        return (f"cannot listen on {listen!r}: the socket is in use (another sidecar?) or its "
                "folder is not writable")
    port = listen.rsplit(":", 1)[-1]
    return (f"cannot listen on {listen!r}: port {port} in use (another sidecar?); stop it or "
            "choose another port with --listen / AGENTSAGA_LISTEN")


@dataclass
class Serving:
    server: grpc.Server
    health: health.HealthServicer
    port: int
    address: str

    def stop(self, grace: float = 2.0) -> None:
        self.health.enter_graceful_shutdown()
        self.server.stop(grace).wait()


def serve(servicer: SidecarServicer, listen: str, *, workers: int = 32) -> Serving:
    """Start the server on `listen` (host:port, port 0 for any, or unix:/path); SERVING once up."""
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="sidecar"),
        # no SO_REUSEPORT: a second sidecar on a taken port must fail, not share it
        options=[("grpc.max_receive_message_length", 8 << 20), ("grpc.so_reuseport", 0)],
        interceptors=telemetry.server_interceptors(),  # `traceparent` from the agent
    )
    pb_grpc.add_SidecarServicer_to_server(servicer, server)
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        (SERVICE_NAME, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
         reflection.SERVICE_NAME), server)
    try:
        port = server.add_insecure_port(listen)
    except RuntimeError:  # grpcio >= 1.60 raises where older versions returned 0
        port = 0
    if port == 0:
        raise errors.ConfigurationError(_bind_failure(listen))
    server.start()
    for name in ("", SERVICE_NAME):
        health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    address = listen if listen.startswith("unix:") else f"{listen.rsplit(':', 1)[0]}:{port}"
    return Serving(server, health_servicer, port, address)
