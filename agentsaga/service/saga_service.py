"""The saga service: every decision a front end (gRPC, MCP) asks for, over typed inputs and
outputs (`agentsaga.calls`), with no transport type in sight.

    begin_run        create the run, or adopt it (R12: bumps its epoch); the only adoption
    ensure_begun     begin_run unless this process holds the run already (a front end whose
                     calls carry no BeginRun: MCP)
    dispatch         one tool call (R2, R3, R5, R6, R10) of a run this process owns
    dispatch_request the same from raw input: run id and size checks, the per-run rate limit
    get_run, list_tools
    end_run          the run ends (a required pivot must be approved to succeed)
    reach_pivot      stage the plan for one human approval (R10); await_decision waits for it
    reconcile        settle the run's unknown rows by key (R7)
    unwind           reconcile, compensate backwards, queue corrections (R8, R9)

R12 on every path: a run is served only while this process holds its current epoch, taken by
`begin_run`. Once another writer adopted it, every writing call is refused (`Fenced`) before
anything changes; a process that never began the run is told to call BeginRun. One action at a
time per run in this process (a run lock): an unwind never settles a call in flight.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import TypeVar

from agentsaga import telemetry, waiting
from agentsaga.calls import (
    BeganRun,
    DispatchCall,
    DispatchResult,
    EndRunCall,
    Interceptor,
    RunView,
    ToolInfo,
)
from agentsaga.errors import (
    PermissionDenied,
    PivotError,
    RateLimited,
    RunEnded,
    RunNotFound,
    RunUnsettled,
)
from agentsaga.saga import pivot
from agentsaga.saga.dispatch import Dispatcher, RunPolicy
from agentsaga.saga.reconcile import Reconciler, settle_command
from agentsaga.saga.registry import JSON, Registry, ToolSpec
from agentsaga.saga.resolution import reconcile_owned, unwind_owned
from agentsaga.saga.resolution_report import ResolutionReport
from agentsaga.saga.tool_schema import check_arguments, input_schema
from agentsaga.service.rate_limit import RunRateLimiter
from agentsaga.service.requests import (
    checked_args,
    end_state,
    own_run_id,
    parse_args,
    parse_plan,
)
from agentsaga.service.run_locks import RunLocks
from agentsaga.settings import Settings
from agentsaga.states import DispatchOutcome, PivotState, RunState
from agentsaga.store import PivotRecord, Run
from agentsaga.store.interfaces import SidecarStore
from agentsaga.time_contract import parse_overrides

logger = logging.getLogger(__name__)

OnBegin = Callable[[str, str, bool], None]
"""Called after a run began or was adopted: (run id, agent, adopted)."""


class SagaService:
    """The runs this process serves, and every action on them."""

    def __init__(self, saga_log: SidecarStore, registry: Registry, settings: Settings, *,
                 sleep: Callable[[float], None] = waiting.sleep,
                 interceptors: Sequence[Interceptor] = (), on_begin: OnBegin | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.saga_log = saga_log  # what a sidecar may write (agentsaga.store.interfaces)
        self.registry = registry
        self.settings = settings
        self.sleep = sleep
        self.clock = clock
        self.on_begin = on_begin
        registry.override_timing(parse_overrides(settings.connectors.time_contracts))  # R7
        self.reconciler = Reconciler(saga_log, registry, settings.recheck_pause_s, sleep)
        self.dispatcher = Dispatcher(saga_log, registry, self.reconciler)
        self.limiter = RunRateLimiter(settings.max_calls_per_s, clock=clock)
        # every request, per run and over all runs (Dispatch also takes `limiter`)
        self.request_limiter = RunRateLimiter(
            settings.max_rpcs_per_s, clock=clock,
            what="run {run!r} makes more than {rate:g} requests per second "
                 "(AGENTSAGA_MAX_RPCS_PER_S)")
        self.total_limiter = RunRateLimiter(
            settings.max_total_rpcs_per_s, clock=clock,
            what="the sidecar serves more than {rate:g} requests per second over all runs "
                 "(AGENTSAGA_MAX_TOTAL_RPCS_PER_S)")
        # waits for a decision hold a worker each: at most half of them, so that health checks
        # and every other request are always served
        self._waiters = threading.BoundedSemaphore(max(1, settings.workers // 2))
        self.interceptors = tuple(interceptors)
        self._epochs: dict[str, int] = {}
        self._locks = RunLocks()
        self._guard = threading.Lock()

    # -- bounds ----------------------------------------------------------------------------

    def admit_request(self, run_id: str = "") -> None:
        """Every request a front end takes (each gRPC RPC, each MCP tools/list and tools/call):
        within the total rate and, naming a run, within the run's rate (RESOURCE_EXHAUSTED
        beyond either, before anything is read or written).
        The run's rate is the run's, by its saga-log id: naming it bare or qualified with the
        namespace draws on one budget."""
        self.total_limiter.take("")
        if run_id:
            self.request_limiter.take(self.log_id(run_id))

    # -- runs ------------------------------------------------------------------------------

    def log_id(self, run_id: str) -> str:
        """The saga-log id of the run a request names: a run of this sidecar's namespace
        (`namespace/run-id`; the bare id outside Kubernetes). A run id is unique within its
        namespace; a request never reaches another namespace's run."""
        return own_run_id(run_id=run_id, namespace=self.settings.pod_namespace)

    def begin_run(self, run_id: str, *, agent: str = "") -> BeganRun:
        """Create or adopt the run (R12); this process then holds its epoch. The run is bound
        to this sidecar's pod, known from the downward API only (AGENTSAGA_POD_NAME, _UID,
        _NAMESPACE, set by the chart's injection), never from the request; a run bound to
        another pod is adopted only once the operator saw that pod go."""
        run_id = self.log_id(run_id)
        self._check_quota(run_id)
        existing = self.saga_log.run(run_id)
        if existing is not None and not existing.open:
            raise RunEnded(f"run {run_id!r} has ended ({existing.state}); start a new run id")
        adoption = self.saga_log.begin_run(
            run_id, agent=agent, owner=self.settings.pod_name, pod_uid=self.settings.pod_uid,
            namespace=self.settings.pod_namespace, trace_context=telemetry.trace_carrier())
        run = adoption.run
        with self._guard:
            self._epochs[run_id] = run.owner_epoch
        if self.on_begin is not None:
            self.on_begin(run.run_id, run.agent, adoption.adopted)
        newest = self.saga_log.newest_step(run_id)
        return BeganRun(run, adoption.adopted, 0 if newest is None else newest.step_idx + 1)

    def ensure_begun(self, run_id: str, *, agent: str = "") -> None:
        """Begin or adopt the run unless this process holds its epoch already: the first call
        of a front end that has no BeginRun (MCP) begins the run, later ones do not adopt it
        again. Under the run lock, so that two first calls adopt it once."""
        run_id = self.log_id(run_id)
        with self.run_lock(run_id):
            if not self.holds(run_id):
                self.begin_run(run_id, agent=agent)

    def _check_quota(self, run_id: str) -> None:
        """A new run is begun only while this sidecar holds fewer than AGENTSAGA_MAX_OPEN_RUNS
        open runs (adopting one it holds again is always allowed). At the limit, the runs that
        ended without EndRun here (unwound, ended or adopted by another writer) are let go
        first. A cheap first check: the bound that holds across sidecars is Postgres's
        (migration 020: runs begun per window and open runs per namespace, `RunsBounded`)."""
        limit = self.settings.max_open_runs
        with self._guard:
            if run_id in self._epochs or len(self._epochs) < limit:
                return
            held = dict(self._epochs)
        for other, epoch in held.items():
            run = self.saga_log.run(other)
            if run is None or not run.open or run.owner_epoch != epoch:
                self.release(other)  # ended, or adopted by another writer (R12)
        with self._guard:
            if len(self._epochs) < limit:
                return
        raise RateLimited(
            f"this sidecar holds {limit} open runs already, its limit (AGENTSAGA_MAX_OPEN_RUNS); "
            f"run {run_id!r} was not begun and nothing was written. End a run (EndRun) first, "
            "or raise the limit.")

    def release(self, run_id: str) -> None:
        """Forget what this process keeps of a run that ended here: its epoch (a later call is
        told the run has ended, from the log)."""
        with self._guard:
            self._epochs.pop(run_id, None)
        self.limiter.forget(run_id)
        self.request_limiter.forget(run_id)

    def run_state(self) -> dict[str, int]:
        """What this process keeps per run: the runs it holds open (epochs) and the run locks
        held or waited for now. Both return to zero once every run ended and no call is in
        flight, whatever runs were named."""
        with self._guard:
            held = len(self._epochs)
        return {"open_runs": held, "run_locks": len(self._locks)}

    def holds(self, run_id: str) -> bool:
        """Whether this process began or adopted the run (holds an epoch of it, R12)."""
        return run_id in self._epochs

    def get_run(self, run_id: str) -> RunView:
        run_id = self.log_id(run_id)
        run = self.saga_log.require_run(run_id)
        self.check_bound(run)
        return RunView(run, self.saga_log.steps(run_id))

    def list_tools(self) -> list[ToolInfo]:
        return [ToolInfo(s.name, s.cls, s.description, s.lookup is not None,
                         s.compensate is not None, input_schema(s)) for s in self.registry]

    def end_run(self, run_id: str, outcome: str = "Succeeded") -> Run:
        """End the run as Succeeded or Failed (the agent's words)."""
        run_id = self.log_id(run_id)
        call = EndRunCall(run_id, end_state(outcome))
        proceed: Callable[[EndRunCall], Run] = self._end_run
        for interceptor in reversed(self.interceptors):
            proceed = _bind(interceptor.end_run, proceed)
        return proceed(call)

    def _end_run(self, call: EndRunCall) -> Run:
        run_id = call.run_id
        with self.run_lock(run_id):
            if not self.holds(run_id):  # ended here already, perhaps: EndRun let go of it
                ended = self.saga_log.run(run_id)
                if ended is not None and not ended.open and ended.state == call.state:
                    # EndRun sent again (its answer was lost): the run ended as asked, once
                    self.check_bound(ended)
                    return ended
            epoch = self.epoch(run_id)
            run = self.saga_log.require_owner(run_id, epoch)
            if call.state == RunState.SUCCEEDED and self.policy_of(run).pivot_required and (
                    run.pivot is None or run.pivot.state != PivotState.APPROVED):
                raise PivotError(
                    f"run {run_id!r} requires a pivot (spec.pivot.required) and has no "
                    "approved plan; it cannot succeed without one. Stage the plan with "
                    "ReachPivot, or end the run as Failed.")
            if call.state == RunState.SUCCEEDED:
                self._check_all_settled(run_id)
            self.saga_log.set_run_state(run_id, epoch, call.state, end=True)
            self.release(run_id)
            return self.saga_log.require_run(run_id)

    def _check_all_settled(self, run_id: str) -> None:
        """A run succeeds only when every step's outcome is known (R5, R7): ended Succeeded
        over an unknown one, nobody would ever settle it, though it may not have happened."""
        unsettled = [s for s in self.saga_log.steps(run_id) if not s.settled]
        if not unsettled:
            return
        step = unsettled[-1]
        waiting = {w.step_idx for w in self.saga_log.settlements(run_id, waiting_only=True)}
        if step.step_idx in waiting:
            then = (f"only a person can settle it ({settle_command(run_id, step.step_idx)}); "
                    "end the run once they have, or end it as Failed")
        else:
            then = (f"call {step.tool} again to settle it, or end the run as Failed (its unwind "
                    "settles it)")
        raise RunUnsettled(
            f"run {run_id!r} cannot succeed: step {step.step_idx} ({step.tool}) has an unknown "
            f"outcome; {then}. Nothing was changed.")

    # -- ownership (R12) -------------------------------------------------------------------

    def epoch(self, run_id: str, *, ended: str = "no more calls",
              resolving: bool = False) -> int:
        """The epoch this process holds for the run (taken by `begin_run`, let go when the run
        ended here). An ended run is refused (RunEnded, saying `ended`), unless `resolving`
        (reconcile, unwind: they resolve an ended run, settling its rows) and this sidecar's
        pod is still its owner in the log: no one adopted it since, so its epoch there is this
        pod's."""
        held = self._epochs.get(run_id)
        if held is None:
            run = self.saga_log.require_run(run_id)
            self.check_bound(run)
            if not run.open:
                if resolving and (run.owner, run.pod_uid) == (self.settings.pod_name,
                                                            self.settings.pod_uid):
                    return run.owner_epoch
                raise RunEnded(f"run {run_id!r} has ended ({run.state}); {ended}")
            raise RunNotFound(run_id, in_log=True)
        return held

    def check_bound(self, run: Run) -> None:
        """A sidecar serves the runs of its own pod: a run bound to another pod that this
        process neither began nor adopted (BeginRun) is refused."""
        if run.run_id in self._epochs or not run.pod_uid:
            return
        if run.pod_uid != self.settings.pod_uid:
            raise PermissionDenied(
                f"run {run.run_id!r} is bound to another pod; this sidecar serves pod "
                f"{self.settings.pod_uid or '(none)'!r}. Call BeginRun to adopt it on purpose.")

    def policy_of(self, run: Run) -> RunPolicy:
        """The run's own policy (its AgentRun's spec, copied into the log by the operator),
        else the sidecar's defaults."""
        if run.policy is None:
            return RunPolicy(self.settings.irreversible_before_pivot)
        return RunPolicy.from_spec(run.policy)

    def run_lock(self, run_id: str,
                 on_wait: Callable[[], None] | None = None) -> AbstractContextManager[None]:
        """One action at a time on a run in this process: a dispatch, a reconcile, an unwind,
        staging the pivot, ending the run (an unwind must not settle a call in flight). The
        lock is gone once nobody holds or waits for it (`run_locks`)."""
        return self._locks.hold(run_id, on_wait=on_wait)

    # -- dispatch --------------------------------------------------------------------------

    def dispatch_request(self, run_id: str, tool: str, args: str | JSON) -> DispatchResult:
        """A tool call as a front end receives it: the run id checked, the run's rate limit
        taken, the arguments held to their bounds (a JSON object of bounded size): parsed from
        their text (gRPC), or as parsed with the request that carried them (MCP), never twice."""
        run_id = self.log_id(run_id)
        self.limiter.take(run_id)
        limit = self.settings.max_args_bytes
        return self._intercepted(run_id, tool, parse_args(
            args, limit, self.settings.max_json_depth) if isinstance(args, str)
            else checked_args(args, limit))

    def dispatch(self, run_id: str, tool: str, args: JSON) -> DispatchResult:
        """One tool call through the registry, the saga log and the real system."""
        return self._intercepted(self.log_id(run_id), tool, args)

    def _intercepted(self, run_id: str, tool: str, args: JSON) -> DispatchResult:
        """`_dispatch` through the interceptors (tracing); `run_id` is the saga-log id."""
        cls = self.registry.get(tool).cls if tool in self.registry else ""
        proceed: Callable[[DispatchCall], DispatchResult] = self._dispatch
        for interceptor in reversed(self.interceptors):
            proceed = _bind(interceptor.dispatch, proceed)
        out = proceed(DispatchCall(run_id, tool, args, cls))
        _log_outcome(run_id, tool, out)
        return out

    def _dispatch(self, call: DispatchCall) -> DispatchResult:
        run_id = call.run_id  # the saga-log id: `_intercepted` made the call from it
        spec = self.registry.get(call.tool)
        check_arguments(spec, call.args)  # typed, before anything is written (R2)
        if not spec.logged:
            return self._call_pure(run_id, spec, call.args)
        with self.run_lock(run_id):
            epoch = self.epoch(run_id)
            # read once, used for the pivot too; no read at all while this process holds the
            # run's epoch and wrote its newest step itself (SagaLog.cursor)
            cursor = self.saga_log.cursor(run_id, epoch)
            if cursor is not None and cursor[1] is not None and not cursor[1].settled:
                cursor = None  # a person may have settled it since (agentsaga settle): read
            if cursor is not None and spec.needs_approval and cursor[0].pivot is None:
                # the policy that may admit it before the pivot is the AgentRun's, which the
                # operator copies into the log whenever it likes (set_policy): read
                cursor = None
            run, newest = cursor if cursor is not None else self.saga_log.run_and_newest(run_id)
            if run is None:
                raise RunNotFound(run_id)
            self._check_open(run)
            return self.dispatcher.dispatch_logged(run, epoch, self.policy_of(run), spec,
                                                   call.args, newest)

    def _call_pure(self, run_id: str, spec: ToolSpec, args: JSON) -> DispatchResult:
        """R2: a pure call writes nothing and has no effect anywhere. The run must be open and
        this pod's: read once (with its newest step, which becomes the run's cursor, as for a
        side-effecting call); while this process holds the run's epoch and that cursor, the
        next pure calls are answered without a read. A writer elsewhere that takes the run over
        bumps its epoch first, and the next side-effecting call here is refused (R12)."""
        held = self._epochs.get(run_id)
        if held is None or self.saga_log.cursor(run_id, held) is None:
            run, _ = self.saga_log.run_and_newest(run_id)
            if run is None:
                raise RunNotFound(run_id)
            self._check_open(run)
        return self.dispatcher.call_pure(spec, args)

    def _check_open(self, run: Run) -> None:
        self.check_bound(run)
        if not run.open:
            raise RunEnded(f"run {run.run_id!r} has ended ({run.state}); no more calls")

    # -- the pivot (R10) -------------------------------------------------------------------

    def reach_pivot(self, run_id: str, plan: list[JSON]) -> PivotRecord:
        """Stage `plan`; each commit step's arguments are held to AGENTSAGA_MAX_ARGS_BYTES, as
        its call will be."""
        run_id = self.log_id(run_id)
        with self.run_lock(run_id):
            epoch = self.epoch(run_id, ended="it has no pivot to reach")
            return pivot.stage(self.saga_log, self.registry, run_id, epoch, plan,
                               max_args_bytes=self.settings.max_args_bytes)

    def reach_pivot_request(self, run_id: str, plan_json: str) -> PivotRecord:
        """ReachPivot from raw input: the plan's size (AGENTSAGA_MAX_PLAN_BYTES) and depth
        checked before it is parsed."""
        run_id = self.log_id(run_id)
        return self.reach_pivot(run_id, parse_plan(plan_json, self.settings.max_plan_bytes,
                                                   self.settings.max_json_depth))

    def await_decision(self, run_id: str, timeout: float,
                       gone: Callable[[], bool] = lambda: False) -> PivotRecord | None:
        """Wait for the decision at most `timeout` seconds, capped by AGENTSAGA_AWAIT_DECISION_
        MAX_S; `gone`: whether the caller left (the wait ends then). At most half the workers
        wait at once; one more wait is refused (RESOURCE_EXHAUSTED) rather than starve the
        others."""
        run_id = self.log_id(run_id)
        # a sidecar serves the runs of its own pod: another pod's plan is not shown here
        self.check_bound(self.saga_log.require_run(run_id))
        bounded = min(max(0.0, timeout), self.settings.await_decision_max_s)
        if not self._waiters.acquire(blocking=False):
            raise RateLimited(
                "too many AwaitDecision calls are waiting in this sidecar already (at most "
                "half of AGENTSAGA_WORKERS); call again later, with a timeout")
        try:
            return pivot.await_decision(self.saga_log, run_id, bounded, gone=gone)
        finally:
            self._waiters.release()

    # -- reconcile and unwind (R7, R8) -----------------------------------------------------

    def reconcile(self, run_id: str) -> ResolutionReport:
        run_id = self.log_id(run_id)
        with self.run_lock(run_id):
            return reconcile_owned(self.saga_log, self.registry, run_id,
                                   self.epoch(run_id, resolving=True),
                                   recheck_pause_s=self.settings.recheck_pause_s,
                                   sleep=self.sleep)

    def unwind(self, run_id: str) -> ResolutionReport:
        run_id = self.log_id(run_id)
        with self.run_lock(run_id, on_wait=lambda: logger.info(
                "unwind waits for the call in flight", extra={"run_id": run_id})):
            # the epoch is kept: unwinding again is allowed (and settles nothing new); the
            # quota lets an unwound run go when it needs the room
            return unwind_owned(self.saga_log, self.registry, run_id,
                                self.epoch(run_id, resolving=True),
                                recheck_pause_s=self.settings.recheck_pause_s,
                                sleep=self.sleep)


def _log_outcome(run_id: str, tool: str, out: DispatchResult) -> None:
    """One line per call that did not simply happen (INFO), or per call (DEBUG, --verbose);
    with the run, step, tool and key (`agentsaga.telemetry.logformat`)."""
    level = logging.DEBUG if out.outcome == DispatchOutcome.CONFIRMED else logging.INFO
    if logger.isEnabledFor(level):
        logger.log(level, "%s%s", out.outcome, f": {out.message}" if out.message else "",
                   extra={"run_id": run_id, "step": out.step_idx, "tool": tool, "key": out.key})


C = TypeVar("C")
R = TypeVar("R")


def _bind(method: Callable[[C, Callable[[C], R]], R],
          proceed: Callable[[C], R]) -> Callable[[C], R]:
    """`method(call, proceed)` as a function of the call: one link of the interceptor chain."""
    return lambda call: method(call, proceed)
