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
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agentsaga import crashpoints, pivot, telemetry
from agentsaga.calls import DispatchResult
from agentsaga.errors import InvalidArguments, LogUnavailable, OutcomeUnknown, Rejected
from agentsaga.keys import step_key
from agentsaga.reconcile import Reconciler
from agentsaga.registry import JSON, Registry, ToolSpec, as_effect
from agentsaga.states import DispatchOutcome, StepStatus
from agentsaga.store import Run, SagaLog, Step

logger = logging.getLogger(__name__)

UNKNOWN_MESSAGE = (
    "outcome unknown: the call may or may not have happened. Do not retry with new arguments "
    "and do not assume it failed; call the same tool again to let the harness resolve it."
)


@dataclass(frozen=True)
class RunPolicy:
    """A run's rules at the pivot (R10): from its AgentRun's spec, else the sidecar's settings."""

    irreversible_before_pivot: pivot.Policy = "refuse"
    pivot_required: bool = False

    @classmethod
    def from_spec(cls, spec: dict[str, Any]) -> RunPolicy:
        """The pivot rules an AgentRun's spec sets (as the operator copied it into the log)."""
        policy = spec.get("irreversibleBeforePivot", "refuse")
        return cls(irreversible_before_pivot="count" if policy == "count" else "refuse",
                   pivot_required=bool((spec.get("pivot") or {}).get("required", False)))


class Dispatcher:
    """One tool call of a run this process owns (the caller holds its epoch and its lock)."""

    def __init__(self, saga_log: SagaLog, registry: Registry, reconciler: Reconciler) -> None:
        self.saga_log = saga_log
        self.registry = registry
        self.reconciler = reconciler

    def call_pure(self, spec: ToolSpec, args: JSON) -> DispatchResult:
        """R2: a pure tool is called with no row."""
        try:
            effect = as_effect(_jsonable(spec.fn(**args)))
        except Rejected as exc:
            return DispatchResult(DispatchOutcome.FAILED, message=str(exc))
        except Exception as exc:  # a pure tool has no effect: any failure is just a failure
            return DispatchResult(DispatchOutcome.FAILED, message=f"{type(exc).__name__}: {exc}")
        return DispatchResult(DispatchOutcome.CONFIRMED,
                              result=None if effect is None else effect.result,
                              external_ref=None if effect is None else effect.ref)

    def dispatch_logged(self, run: Run, epoch: int, policy: RunPolicy, spec: ToolSpec,
                        args: JSON, newest: Step | None) -> DispatchResult:
        """The decision table above, for a side-effecting tool; `newest` is the run's newest
        row as read with `run`."""
        run_id = run.run_id
        retry_of: Step | None = None
        if (newest is not None and newest.status == StepStatus.NOT_EXECUTED
                and newest.tool == spec.name):
            retry_of = newest  # R3: settled as never happened (by a job); same step, same key
        elif newest is not None and not newest.settled:
            if newest.tool != spec.name:
                return DispatchResult(
                    DispatchOutcome.STEP_UNRESOLVED, newest.step_idx, newest.idempotency_key,
                    status=newest.status,
                    message=(f"step {newest.step_idx} ({newest.tool}) has an unknown outcome; "
                             f"call {newest.tool} again to resolve it before anything else"),
                )
            self.saga_log.require_owner(run_id, epoch)  # R12 before asking a real system
            settled = self.reconciler.settle(newest, epoch).step  # R7 before any retry
            if settled.status == StepStatus.CONFIRMED:
                return _confirmed(settled, "already happened: found by its idempotency key")
            if settled.status != StepStatus.NOT_EXECUTED:
                return _unknown(settled)
            retry_of = settled
        step_idx = retry_of.step_idx if retry_of else (newest.step_idx + 1 if newest else 0)
        key = step_key(run_id, step_idx, spec.name)  # R3: from the run, never the model

        admission = pivot.admit(run, spec, args, policy.irreversible_before_pivot,
                                lambda: self.saga_log.commits_taken(run_id))
        if not admission.allowed:
            return DispatchResult(DispatchOutcome.NEEDS_APPROVAL, step_idx, key,
                                  message=admission.reason)
        compensation = spec.build_compensation(args, key)  # R6: before the call, or refuse
        audience = spec.audience(args)  # R9
        comp_json = None if compensation is None else compensation.to_json()
        if retry_of is not None:
            intended = self.saga_log.re_intend(run_id, epoch, step_idx, args=args,
                                               compensation=comp_json, audience=audience)
        else:
            intended = self.saga_log.record_intent(
                run_id, epoch, step_idx, tool=spec.name, tool_class=spec.cls, key=key, args=args,
                compensation=comp_json, audience=audience, after_pivot=admission.after_pivot,
                commit_index=admission.commit_index)
        if intended is None:  # another writer took this step at the same moment
            return DispatchResult(DispatchOutcome.STEP_UNRESOLVED, step_idx, key,
                                  status=StepStatus.INTENDED,
                                  message=f"step {step_idx} is taken, or an earlier step is "
                                          "still unresolved; call again to see which")
        if admission.counts_irreversible:
            self.saga_log.update_run(run_id, epoch, count_irreversible=True)
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
            outcome = StepStatus.CONFIRMED
        except Rejected as exc:
            outcome, error = StepStatus.FAILED, str(exc)
        except Exception as exc:  # R5: timeouts, resets, 5xx and surprises may have happened
            level = logging.INFO if isinstance(exc, OutcomeUnknown) else logging.WARNING
            logger.log(level, "outcome unknown: %s", exc, extra=extra,
                       exc_info=not isinstance(exc, OutcomeUnknown))
            outcome, error = StepStatus.UNKNOWN, f"{type(exc).__name__}: {exc}"
        try:
            row = self.saga_log.record_outcome(
                step.run_id, epoch, step.step_idx, outcome, error=error,
                result=None if effect is None else effect.result,
                external_ref=None if effect is None else effect.ref, intended=step)
            if outcome == StepStatus.CONFIRMED and row is None:
                row = self.saga_log.step(step.run_id, step.step_idx)
        except LogUnavailable as exc:
            # R11: the call returned, but the log could not take its outcome. The row stays
            # INTENDED, and the next call of this tool settles it by key (R7).
            logger.warning("outcome %s not recorded: %s", outcome, exc, extra=extra)
            return DispatchResult(
                DispatchOutcome.UNKNOWN, step.step_idx, step.idempotency_key,
                status=StepStatus.INTENDED,
                message=UNKNOWN_MESSAGE + " (the call returned, but the saga log could not "
                        "record its outcome; it is settled by its key on the next call)")
        if outcome == StepStatus.FAILED:
            return DispatchResult(DispatchOutcome.FAILED, step.step_idx, step.idempotency_key,
                                  message=error or "",
                                  status=row.status if row else StepStatus.FAILED)
        if outcome == StepStatus.UNKNOWN or row is None:
            return _unknown(row or step)
        return _confirmed(row, "")





def _confirmed(step: Step, message: str) -> DispatchResult:
    return DispatchResult(DispatchOutcome.CONFIRMED, step.step_idx, step.idempotency_key,
                          step.result, step.external_ref, message, step.status)


def _unknown(step: Step) -> DispatchResult:
    detail = f" ({step.error})" if step.error else ""
    return DispatchResult(DispatchOutcome.UNKNOWN, step.step_idx, step.idempotency_key,
                          message=UNKNOWN_MESSAGE + detail, status=step.status)


@functools.lru_cache(maxsize=1024)
def _signature(fn: Callable[..., Any]) -> inspect.Signature | None:
    """A tool's signature, read once per function (inspect.signature is slow on every call)."""
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):
        return None


def check_signature(spec: ToolSpec, args: JSON) -> None:
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
