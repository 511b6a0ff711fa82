"""Dispatch (R2, R3, R5, R6): one tool call through the registry, the saga log and the real system.

    pure tool ............................................. call it; no row (R2)
    newest row unsettled, other tool ...................... STEP_UNRESOLVED, nothing called (R3)
    newest row unsettled, same tool ....................... reconcile by key first (R7):
        found .......................................... CONFIRMED, the found result
        not found ...................................... run the same step again, same key
        unknown ........................................ UNKNOWN again
    otherwise ............................................. a new step: next index, its key
    gate (pivot, approval) ................................ NEEDS_APPROVAL, no row (R6, R10)
    compensation + audience built, INTENDED committed ..... then the call (R2, R6, R9)
    the call: result -> CONFIRMED, Rejected -> FAILED, anything else -> UNKNOWN (R5)
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import psycopg

from agentsaga import crashpoints, pivot, telemetry
from agentsaga.errors import (
    InvalidArguments,
    InvalidRunId,
    OutcomeUnknown,
    PermissionDenied,
    PivotError,
    Rejected,
    RunEnded,
    RunNotFound,
)
from agentsaga.keys import run_id_problem, step_key
from agentsaga.log import Run, SagaLog, Step, StepStatus
from agentsaga.reconcile import Reconciler
from agentsaga.registry import JSON, Registry, ToolSpec, as_effect
from agentsaga.settings import Settings

log = logging.getLogger(__name__)

Outcome = Literal["CONFIRMED", "FAILED", "UNKNOWN", "STEP_UNRESOLVED", "NEEDS_APPROVAL"]

UNKNOWN_MESSAGE = (
    "outcome unknown: the call may or may not have happened. Do not retry with new arguments "
    "and do not assume it failed; call the same tool again to let the harness resolve it."
)


@dataclass(frozen=True)
class RunPolicy:
    """A run's rules at the pivot (R10): from its AgentRun's spec, else the sidecar's settings."""

    irreversible_before_pivot: pivot.Policy = "refuse"
    pivot_required: bool = False


@dataclass(frozen=True)
class DispatchResult:
    outcome: Outcome
    step_idx: int = -1
    key: str = ""
    result: Any = None
    external_ref: str | None = None
    message: str = ""
    status: str = ""
    """The saga-log row's status after the call ('' when no row was touched)."""


def parse_args(args_json: str, limit: int) -> JSON:
    """Arguments as the agent sent them: a JSON object of at most `limit` bytes."""
    size = len(args_json.encode())
    if size > limit:
        raise InvalidArguments(
            f"arguments are {size} bytes; the limit is {limit} (AGENTSAGA_MAX_ARGS_BYTES). "
            "Pass large content by reference (a URL or an id), not inline."
        )
    try:
        value = json.loads(args_json) if args_json.strip() else {}
    except json.JSONDecodeError as exc:
        raise InvalidArguments(f"arguments are not valid JSON: {exc}") from None
    except RecursionError:
        raise InvalidArguments("arguments are nested too deeply to be read") from None
    if not isinstance(value, dict):
        raise InvalidArguments(
            f"arguments must be a JSON object, got a JSON {type(value).__name__}"
        )
    if "\\u0000" in args_json and _has_nul(value):
        raise InvalidArguments("arguments contain a NUL character (\\u0000), which no real "
                               "system takes in text; remove it")
    return value


def _has_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_has_nul(k) or _has_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_nul(v) for v in value)
    return False


def check_run_id(run_id: str) -> None:
    problem = run_id_problem(run_id)
    if problem:
        raise InvalidRunId(problem)


class Dispatcher:
    """Runs tool calls for the runs this process owns (it holds their owner epochs)."""

    def __init__(self, saga_log: SagaLog, registry: Registry, settings: Settings,
                 *, sleep: Callable[[float], None] | None = None) -> None:
        self.log = saga_log
        self.registry = registry
        self.settings = settings
        self.reconciler = Reconciler(saga_log, registry, settings.recheck_pause_s,
                                     **({"sleep": sleep} if sleep else {}))
        self._epochs: dict[str, int] = {}
        self._policies: dict[str, RunPolicy] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    # -- runs ------------------------------------------------------------------------------

    def begin_run(self, run_id: str, *, agent: str = "", owner: str = "", pod_uid: str = "",
                  namespace: str = "") -> tuple[Run, bool]:
        """Create or adopt the run (R12); this process then holds its epoch."""
        check_run_id(run_id)
        existing = self.log.run(run_id)
        if existing is not None and not existing.open:
            raise RunEnded(f"run {run_id!r} has ended ({existing.state}); start a new run id")
        adoption = self.log.begin_run(run_id, agent=agent, owner=owner or self.settings.pod_name,
                                      pod_uid=pod_uid or self.settings.pod_uid,
                                      namespace=namespace or self.settings.pod_namespace,
                                      trace_context=telemetry.trace_carrier())
        with self._guard:
            self._epochs[run_id] = adoption.run.owner_epoch
        return adoption.run, adoption.adopted

    def check_bound(self, run: Run) -> None:
        """A sidecar serves the runs of its own pod: a run bound to another pod that this
        process neither began nor adopted (BeginRun) is refused."""
        if run.run_id in self._epochs or not run.pod_uid:
            return
        if run.pod_uid != self.settings.pod_uid:
            raise PermissionDenied(
                f"run {run.run_id!r} is bound to another pod; this sidecar serves pod "
                f"{self.settings.pod_uid or '(none)'!r}. Call BeginRun to adopt it on purpose.")

    def epoch(self, run_id: str) -> int:
        """The epoch this process holds for the run; adopts the run if it holds none."""
        held = self._epochs.get(run_id)
        if held is None:
            self.check_bound(self.log.require_run(run_id))
            run, _ = self.begin_run(run_id)
            held = run.owner_epoch
        return held

    def set_policy(self, run_id: str, policy: RunPolicy) -> None:
        """The run's own policy (its AgentRun's spec), over the sidecar's defaults."""
        with self._guard:
            self._policies[run_id] = policy

    def policy(self, run_id: str) -> RunPolicy:
        return self._policies.get(run_id) or RunPolicy(self.settings.irreversible_before_pivot)

    @telemetry.run_ended
    def end_run(self, run_id: str, state: str = "succeeded") -> Run:
        check_run_id(run_id)
        if state == "succeeded" and self.policy(run_id).pivot_required:
            decided = (self.log.require_run(run_id).pivot or {}).get("state")
            if decided != "Approved":
                raise PivotError(
                    f"run {run_id!r} requires a pivot (spec.pivot.required) and has no approved "
                    "plan; it cannot succeed without one. Stage the plan with ReachPivot, or end "
                    "the run as Failed.")
        with self.run_lock(run_id):
            self.log.set_run_state(run_id, self.epoch(run_id), state, end=True)
            return self.log.require_run(run_id)

    def run_lock(self, run_id: str) -> threading.Lock:
        """One action at a time on a run in this process: a dispatch, a reconcile, an unwind,
        staging the pivot, ending the run (an unwind must not settle a call in flight)."""
        with self._guard:
            return self._locks.setdefault(run_id, threading.Lock())

    # -- dispatch --------------------------------------------------------------------------

    @telemetry.dispatch_traced
    def dispatch(self, run_id: str, tool: str, args: JSON) -> DispatchResult:
        check_run_id(run_id)
        spec = self.registry.get(tool)
        _check_signature(spec, args)
        if not spec.logged:
            self._check_open(self.log.require_run(run_id))
            return self._call_pure(spec, args)
        with self.run_lock(run_id):
            # read once, used for the pivot too; no read at all while this process holds the
            # run's epoch and wrote its newest step itself (SagaLog.cursor)
            held = self._epochs.get(run_id)
            cursor = None if held is None else self.log.cursor(run_id, held)
            run, newest = cursor if cursor is not None else self.log.run_and_newest(run_id)
            if run is None:
                raise RunNotFound(run_id)
            self._check_open(run)
            return self._dispatch_logged(run, spec, args, newest)

    def _check_open(self, run: Run) -> None:
        self.check_bound(run)
        if not run.open:
            raise RunEnded(f"run {run.run_id!r} has ended ({run.state}); no more calls")

    def _call_pure(self, spec: ToolSpec, args: JSON) -> DispatchResult:
        try:
            effect = as_effect(_jsonable(spec.fn(**args)))
        except Rejected as exc:
            return DispatchResult("FAILED", message=str(exc))
        except Exception as exc:  # a pure tool has no effect: any failure is just a failure
            return DispatchResult("FAILED", message=f"{type(exc).__name__}: {exc}")
        return DispatchResult("CONFIRMED", result=None if effect is None else effect.result,
                              external_ref=None if effect is None else effect.ref)

    def _dispatch_logged(self, run: Run, spec: ToolSpec, args: JSON,
                         newest: Step | None) -> DispatchResult:
        run_id = run.run_id
        epoch = self.epoch(run_id)
        retry_of: Step | None = None
        if newest is not None and newest.status == "NOT_EXECUTED" and newest.tool == spec.name:
            retry_of = newest  # R3: settled as never happened (by a job); same step, same key
        elif newest is not None and not newest.settled:
            if newest.tool != spec.name:
                return DispatchResult(
                    "STEP_UNRESOLVED", newest.step_idx, newest.idempotency_key,
                    status=newest.status,
                    message=(f"step {newest.step_idx} ({newest.tool}) has an unknown outcome; "
                             f"call {newest.tool} again to resolve it before anything else"),
                )
            settled = self.reconciler.settle(newest, epoch).step  # R7 before any retry
            if settled.status == "CONFIRMED":
                return _confirmed(settled, "already happened: found by its idempotency key")
            if settled.status != "NOT_EXECUTED":
                return _unknown(settled)
            retry_of = settled
        step_idx = retry_of.step_idx if retry_of else (newest.step_idx + 1 if newest else 0)
        key = step_key(run_id, step_idx, spec.name)  # R3: from the run, never the model

        admission = pivot.admit(run, spec, args, self.policy(run_id).irreversible_before_pivot,
                                lambda: self.log.commits_taken(run_id))
        if not admission.allowed:
            return DispatchResult("NEEDS_APPROVAL", step_idx, key, message=admission.reason)
        compensation = spec.build_compensation(args, key)  # R6: before the call, or refuse
        audience = spec.audience(args)  # R9
        comp_json = None if compensation is None else compensation.to_json()
        if retry_of is not None:
            intended = self.log.re_intend(run_id, epoch, step_idx, args=args,
                                          compensation=comp_json, audience=audience)
        else:
            intended = self.log.record_intent(
                run_id, epoch, step_idx, tool=spec.name, tool_class=spec.cls, key=key, args=args,
                compensation=comp_json, audience=audience, after_pivot=admission.after_pivot,
                commit_index=admission.commit_index)
        if intended is None:  # another writer took this step at the same moment
            return DispatchResult("STEP_UNRESOLVED", step_idx, key, status="INTENDED",
                                  message=f"step {step_idx} is taken, or an earlier step is "
                                          "still unresolved; call again to see which")
        if admission.counts_irreversible:
            self.log.update_run(run_id, epoch, count_irreversible=True)
            telemetry.irreversible_before_pivot(spec.name)
        return self._call(intended, spec, args, epoch)

    def _call(self, step: Step, spec: ToolSpec, args: JSON, epoch: int) -> DispatchResult:
        extra = {"run_id": step.run_id, "step": step.step_idx, "tool": step.tool,
                 "key": step.idempotency_key}
        effect = None
        error: str | None = None
        try:
            crashpoints.reach(f"after_intent:{spec.name}")
            effect = as_effect(_jsonable(spec.fn(**args, idempotency_key=step.idempotency_key)))
            crashpoints.reach(f"after_call:{spec.name}")
            outcome: StepStatus = "CONFIRMED"
        except Rejected as exc:
            outcome, error = "FAILED", str(exc)
        except Exception as exc:  # R5: timeouts, resets, 5xx and surprises may have happened
            level = logging.INFO if isinstance(exc, OutcomeUnknown) else logging.WARNING
            log.log(level, "outcome unknown: %s", exc, extra=extra,
                    exc_info=not isinstance(exc, OutcomeUnknown))
            outcome, error = "UNKNOWN", f"{type(exc).__name__}: {exc}"
        try:
            row = self.log.record_outcome(
                step.run_id, epoch, step.step_idx, outcome, error=error,
                result=None if effect is None else effect.result,
                external_ref=None if effect is None else effect.ref, intended=step)
            if outcome == "CONFIRMED" and row is None:
                row = self.log.step(step.run_id, step.step_idx)
        except psycopg.OperationalError as exc:
            # R11: the call returned, but the log could not take its outcome. The row stays
            # INTENDED, and the next call of this tool settles it by key (R7).
            log.warning("outcome %s not recorded: %s", outcome, exc, extra=extra)
            return DispatchResult(
                "UNKNOWN", step.step_idx, step.idempotency_key, status="INTENDED",
                message=UNKNOWN_MESSAGE + " (the call returned, but the saga log could not "
                        "record its outcome; it is settled by its key on the next call)")
        if outcome == "FAILED":
            return DispatchResult("FAILED", step.step_idx, step.idempotency_key,
                                  message=error or "", status=row.status if row else "FAILED")
        if outcome == "UNKNOWN":
            return _unknown(row or step)
        assert row is not None
        return _confirmed(row, "")



def _confirmed(step: Step, message: str) -> DispatchResult:
    return DispatchResult("CONFIRMED", step.step_idx, step.idempotency_key, step.result,
                          step.external_ref, message, step.status)


def _unknown(step: Step) -> DispatchResult:
    detail = f" ({step.error})" if step.error else ""
    return DispatchResult("UNKNOWN", step.step_idx, step.idempotency_key,
                          message=UNKNOWN_MESSAGE + detail, status=step.status)


@functools.lru_cache(maxsize=1024)
def _signature(fn: Callable[..., Any]) -> inspect.Signature | None:
    """A tool's signature, read once per function (inspect.signature is slow on every call)."""
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):
        return None


def _check_signature(spec: ToolSpec, args: JSON) -> None:
    """Refuse arguments the tool cannot take before anything is written."""
    if "idempotency_key" in args:
        raise InvalidArguments("idempotency_key is set by the harness, never by the agent (R3)")
    problem = _binding_problem(spec.fn, spec.cls == "pure", tuple(args))
    if problem:
        raise InvalidArguments(f"tool {spec.name!r}: {problem}")


@functools.lru_cache(maxsize=4096)
def _binding_problem(fn: Callable[..., Any], pure: bool, names: tuple[str, ...]) -> str:
    """Why the tool cannot be called with these keyword arguments ('' if it can). Binding
    keywords depends on their names only, so the answer is kept per tool and names."""
    signature = _signature(fn)
    if signature is None:
        return ""
    extra = () if pure else ("idempotency_key",)
    try:
        signature.bind(**dict.fromkeys((*names, *extra)))
    except TypeError as exc:
        return str(exc)
    return ""


def _jsonable(value: Any) -> Any:
    """Results are stored as JSON; objects that are not become their JSON rendering."""
    if value is None or isinstance(value, (dict, list, str, int, float, bool)):
        return value
    to_dict = getattr(value, "to_dict", None)
    if callable(to_dict):
        return to_dict()
    return value
