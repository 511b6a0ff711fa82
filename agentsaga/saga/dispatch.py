"""Dispatch (R2, R3, R5, R6): one tool call through the registry, the saga log and the real system.

    pure tool ............................................. call it; no row (R2)
    newest row NOT_EXECUTED, same tool .................... the same step again, same key (R3)
        but a late call saw its effect ................. re-opened as CONFIRMED, not re-sent
    newest row unsettled, other tool ...................... STEP_UNRESOLVED, nothing called (R3)
                                                            (NEEDS_HUMAN if only a person can
                                                            settle it)
    newest row unsettled, same tool ....................... reconcile by key first (R7):
        found (or observed by a late call) ............. CONFIRMED, the found result
        certainly not executed ......................... run the same step again, same key
                                                         (the row keeps the first arguments;
                                                         this attempt is recorded beside it)
        not yet certain ................................ UNKNOWN, retry after N seconds
        unknown ........................................ UNKNOWN again
        no lookup can tell ............................. NEEDS_HUMAN: stop, a person settles it
    otherwise ............................................. a new step: next index, its key
    gate (pivot, approval) ................................ NEEDS_APPROVAL, no row (R6, R10)
    compensation + audience built, INTENDED committed ..... then the call (R2, R6, R9); a
                                                            compensation its tool would refuse
                                                            refuses the call, nothing written
    the call: result -> CONFIRMED, Rejected -> FAILED, anything else -> UNKNOWN (R5)
    the call returned, but its writer was fenced or
    its row settled by someone else ...................... what it saw is recorded as an
                                                            observation (never thrown away);
                                                            settled CONFIRMED meanwhile: that
                                                            is the answer, whatever it saw;
                                                            settled NOT_EXECUTED but the call
                                                            returned its effect: re-opened
                                                            as CONFIRMED (R7)
    the call unknown, and the tool has no lookup .......... NEEDS_HUMAN: a person settles it
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from agentsaga import crashpoints, telemetry
from agentsaga.calls import DispatchResult
from agentsaga.errors import (
    CompensationUnavailable,
    Fenced,
    LogUnavailable,
    OutcomeUnknown,
    Rejected,
    RunEnded,
)
from agentsaga.keys import step_key
from agentsaga.saga import contracts, pivot
from agentsaga.saga.reconcile import Reconciler, no_lookup_why, settle_command
from agentsaga.saga.registry import JSON, Registry, ToolSpec, as_effect
from agentsaga.saga.unwind import compensation_problem
from agentsaga.states import DispatchOutcome, StepStatus
from agentsaga.store import Run, Step
from agentsaga.store.interfaces import SidecarStore
from agentsaga.waiting import waiting

logger = logging.getLogger(__name__)

UNKNOWN_MESSAGE = (
    "outcome unknown: the call may or may not have happened. Do not retry with new arguments "
    "and do not assume it failed; call the same tool again to let the harness resolve it."
)

NEEDS_HUMAN_MESSAGE = (
    "only a person can settle this step: its outcome is unknown and the tool has no lookup. "
    "Do not call {tool} again and do not work around it with other tools; tell the user what "
    "you were doing and end your turn. A person records what happened with `{command}`."
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

    def __init__(self, saga_log: SidecarStore, registry: Registry,
                 reconciler: Reconciler) -> None:
        self.saga_log = saga_log
        self.registry = registry
        self.reconciler = reconciler

    def call_pure(self, spec: ToolSpec, args: JSON) -> DispatchResult:
        """R2: a pure tool is called with no row."""
        try:
            with waiting():
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
            # R3: settled as never happened (by a job); same step, same key, unless a late
            # call saw it happen after all (R7: never re-sent then)
            reopened = self.reconciler.reopen_observed(run_id, epoch, [newest])
            if reopened:
                return _confirmed(reopened[0].step,
                                  "already happened: a late call observed its effect")
            retry_of = newest
        elif newest is not None and not newest.settled:
            if newest.tool != spec.name:
                if newest.status == StepStatus.UNKNOWN and self._no_lookup(newest.tool):
                    return _needs_human(newest)
                return DispatchResult(
                    DispatchOutcome.STEP_UNRESOLVED, newest.step_idx, newest.idempotency_key,
                    status=newest.status,
                    message=(f"step {newest.step_idx} ({newest.tool}) has an unknown outcome; "
                             f"call {newest.tool} again to resolve it before anything else"),
                )
            self.saga_log.require_owner(run_id, epoch)  # R12 before asking a real system
            reconciled = self.reconciler.settle(  # R7 before any retry
                newest, epoch, resend_same=args == self._last_sent(newest))
            settled = reconciled.step
            if reconciled.needs_human:
                return _needs_human(settled)
            if settled.status == StepStatus.CONFIRMED:
                return _confirmed(settled, "already happened: found by its idempotency key")
            if settled.status != StepStatus.NOT_EXECUTED:
                return _unknown(settled, reconciled.retry_after_s)
            retry_of = settled
        step_idx = retry_of.step_idx if retry_of else (newest.step_idx + 1 if newest else 0)
        key = step_key(run_id, step_idx, spec.name)  # R3: from the run, never the model

        admission = pivot.admit(run, spec, args, policy.irreversible_before_pivot,
                                lambda: self.saga_log.commits_taken(run_id))
        if not admission.allowed:
            return DispatchResult(DispatchOutcome.NEEDS_APPROVAL, step_idx, key,
                                  message=admission.reason)
        compensation = spec.build_compensation(args, key)  # R6: before the call, or refuse
        if compensation is not None and compensation.tool not in self.registry:
            raise CompensationUnavailable(
                f"tool {spec.name!r}: its compensation names the tool {compensation.tool!r}, "
                "which is not registered in this process, so an unwind could never run it; "
                "the call was refused and nothing was written or sent. Register "
                f"{compensation.tool!r} in the same tools module (--tools)")
        comp_json = None if compensation is None else compensation.to_json()
        unrunnable = None if comp_json is None else compensation_problem(self.registry, comp_json)
        if unrunnable is not None:
            raise CompensationUnavailable(
                f"tool {spec.name!r}: its compensation could not run as it would be written "
                f"({unrunnable}), so an unwind could never undo the call; the call was refused "
                "and nothing was written or sent. Fix the tool's compensate= function")
        audience = spec.audience(args)  # R9
        # the version of the tool's contract this step runs under: unwind runs only what it
        # declares (agentsaga.saga.contracts)
        contract, version = contracts.versioned(
            spec, self.registry, None if compensation is None else compensation.tool)
        if retry_of is not None:  # the row keeps what was first sent (R11)
            intended = self.saga_log.re_intend(run_id, epoch, step_idx, args=args,
                                               compensation=comp_json, audience=audience,
                                               call_timeout_s=spec.timing.call_timeout_s,
                                               contract=contract, contract_hash=version)
        else:
            intended = self.saga_log.record_intent(
                run_id, epoch, step_idx, tool=spec.name, tool_class=spec.cls, key=key, args=args,
                compensation=comp_json, audience=audience, after_pivot=admission.after_pivot,
                commit_index=admission.commit_index, timing=spec.timing, contract=contract,
                contract_hash=version)
        if intended is None:  # another writer took this step at the same moment
            return DispatchResult(DispatchOutcome.STEP_UNRESOLVED, step_idx, key,
                                  status=StepStatus.INTENDED,
                                  message=f"step {step_idx} is taken, or an earlier step is "
                                          "still unresolved; call again to see which")
        if admission.counts_irreversible:
            self.saga_log.update_run(run_id, epoch, count_irreversible=True)
            telemetry.irreversible_before_pivot(spec.name)
        return self._call(intended, spec, args, epoch)

    def _retry_after(self, step: Step, spec: ToolSpec) -> float | None:
        """Seconds until an empty lookup of this step proves absence (None: no lookup)."""
        if spec.lookup is None:
            return None
        when = self.saga_log.certainty(step.run_id, step.step_idx)
        return None if when is None else when.wait_s

    def _last_sent(self, step: Step) -> JSON:
        """The arguments the step was last sent with: its newest attempt's, else the row's."""
        mine = [a for a in self.saga_log.attempts(step.run_id) if a.step_idx == step.step_idx]
        return dict(mine[-1].args if mine else step.args)

    def _call(self, step: Step, spec: ToolSpec, args: JSON, epoch: int) -> DispatchResult:
        extra = {"run_id": step.run_id, "step": step.step_idx, "tool": step.tool,
                 "key": step.idempotency_key}
        effect = None
        error: str | None = None
        try:
            crashpoints.reach(f"after_intent:{spec.name}")
            with waiting():  # the real system's time, not this process's
                effect = as_effect(_jsonable(
                    spec.fn(**args, idempotency_key=step.idempotency_key)))
            crashpoints.reach(f"after_call:{spec.name}")
            outcome = StepStatus.CONFIRMED
        except Rejected as exc:
            outcome, error = StepStatus.FAILED, str(exc)
        except Exception as exc:  # R5: timeouts, resets, 5xx and surprises may have happened
            level = logging.INFO if isinstance(exc, OutcomeUnknown) else logging.WARNING
            logger.log(level, "outcome unknown: %s", exc, extra=extra,
                       exc_info=not isinstance(exc, OutcomeUnknown))
            outcome, error = StepStatus.UNKNOWN, f"{type(exc).__name__}: {exc}"
        result = None if effect is None else effect.result
        ref = None if effect is None else effect.ref
        settled = step
        try:
            row = self.saga_log.record_outcome(
                step.run_id, epoch, step.step_idx, outcome, error=error,
                result=result, external_ref=ref, intended=step)
            if row is None:  # settled by someone else meanwhile: keep what we saw (R7)
                self.saga_log.record_observation(step, epoch, outcome, external_ref=ref,
                                                 result=result, error=error)
                settled = self.saga_log.step(step.run_id, step.step_idx) or step
        except (Fenced, RunEnded):
            # R12: another writer took the run while the call was on the wire. The real
            # system's answer is not thrown away: reconcile and unwind read it (R7, R8).
            self.saga_log.record_observation(step, epoch, outcome, external_ref=ref,
                                             result=result, error=error)
            raise
        except LogUnavailable as exc:
            # R11: the call returned, but the log could not take its outcome. The row stays
            # INTENDED, and the next call of this tool settles it by key (R7).
            logger.warning(
                "%s ran and came back %s, but the saga log's Postgres at %s could not record "
                "the outcome (%s); the step stays INTENDED and is settled by its key on the "
                "next call or reconcile", step.tool, outcome, exc.where, exc.reason, extra=extra)
            return DispatchResult(
                DispatchOutcome.UNKNOWN, step.step_idx, step.idempotency_key,
                status=StepStatus.INTENDED,
                message=UNKNOWN_MESSAGE + " (the call returned, but the saga log could not "
                        "record its outcome; it is settled by its key on the next call)")
        if row is None:
            return self._answer_settled(settled, spec, outcome, error, epoch)
        if outcome == StepStatus.FAILED:
            return DispatchResult(DispatchOutcome.FAILED, step.step_idx, step.idempotency_key,
                                  message=error or "", status=row.status)
        if outcome == StepStatus.UNKNOWN and spec.lookup is None:
            # no lookup will ever tell: hand the step to a person, and tell the agent to stop
            try:
                self.saga_log.ask_human(row.run_id, epoch, row.step_idx, row.idempotency_key,
                                        no_lookup_why(row))
            except LogUnavailable as exc:  # the next reconcile of the step asks again
                logger.warning(
                    "%s ran and its outcome is UNKNOWN; the saga log's Postgres at %s could not "
                    "record that it waits for a person (%s); the next reconcile asks again",
                    row.tool, exc.where, exc.reason, extra=extra)
            return _needs_human(row)
        if outcome == StepStatus.UNKNOWN:
            return _unknown(row, self._retry_after(step, spec))
        return _confirmed(row, "")

    def _answer_settled(self, settled: Step, spec: ToolSpec, outcome: StepStatus,
                        error: str | None, epoch: int) -> DispatchResult:
        """The answer for a call whose row someone else settled while it was on the wire (a
        reconcile that found the effect by its key, a person): the log's word stands (R7). An
        effect the log holds is the answer, whatever this call saw: told it failed, an agent
        would make it again under a new step and a new key. One exception: a row settled as
        never happened whose effect this very call saw is re-opened as CONFIRMED (the real
        system's word outranks the log's; re-sent, the step could happen twice)."""
        if settled.status == StepStatus.NOT_EXECUTED and outcome == StepStatus.CONFIRMED:
            reopened = self.reconciler.reopen_observed(settled.run_id, epoch, [settled])
            if reopened:
                return _confirmed(reopened[0].step, "")
        if settled.status == StepStatus.CONFIRMED:
            return _confirmed(settled, "")
        if outcome == StepStatus.FAILED:
            return DispatchResult(DispatchOutcome.FAILED, settled.step_idx,
                                  settled.idempotency_key, message=error or "",
                                  status=settled.status)
        return _unknown(settled, self._retry_after(settled, spec))

    def _no_lookup(self, tool: str) -> bool:
        return tool in self.registry and self.registry.get(tool).lookup is None


def _confirmed(step: Step, message: str) -> DispatchResult:
    return DispatchResult(DispatchOutcome.CONFIRMED, step.step_idx, step.idempotency_key,
                          step.result, step.external_ref, message, step.status)


def _needs_human(step: Step) -> DispatchResult:
    message = NEEDS_HUMAN_MESSAGE.format(
        tool=step.tool, command=settle_command(step.run_id, step.step_idx))
    return DispatchResult(DispatchOutcome.NEEDS_HUMAN, step.step_idx, step.idempotency_key,
                          message=f"step {step.step_idx} ({step.tool}): {message}",
                          status=step.status)


def _unknown(step: Step, retry_after_s: float | None = None) -> DispatchResult:
    detail = f" ({step.error})" if step.error else ""
    if retry_after_s is not None:
        detail += (f" Call the same tool again in {retry_after_s:.1f}s or later: by then "
                   "the harness can be certain.")
    return DispatchResult(DispatchOutcome.UNKNOWN, step.step_idx, step.idempotency_key,
                          message=UNKNOWN_MESSAGE + detail, status=step.status,
                          retry_after_s=retry_after_s)


def _jsonable(value: Any) -> Any:
    """Results are stored as JSON; objects that are not become their JSON rendering."""
    if value is None or isinstance(value, (dict, list, str, int, float, bool)):
        return value
    to_dict = getattr(value, "to_dict", None)
    if callable(to_dict):
        return to_dict()
    return value
