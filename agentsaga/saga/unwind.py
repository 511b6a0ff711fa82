"""Unwind (R8, R9): walk a run's log backwards, reading the log, never the transcript (R11).
The rows were reconciled first (R7, `agentsaga.saga.reconcile`).

    not CONFIRMED, or already COMPENSATED ............ skipped
    irreversible ..................................... a correction, queued for a human
    compensation FAILED before ....................... left for a human
    its compensation is not what its tool declares ... comp FAILED, NEEDS_HUMAN with the reason
      (the stored one differs from the one the           (never called)
      registry rebuilds from the step's arguments,
      the tool's contract changed how it undoes, or
      the row carries no contract version)
    otherwise ........................................ comp INTENDED (durable) -> call the
                                                       compensation under its own key ->
                                                       DONE + COMPENSATED (+ a Silent or
                                                       Proposed correction by audience)
    its arguments are ones its tool refuses .......... comp FAILED, reported (never called)
    the compensation is rejected ..................... comp FAILED, reported
    its outcome is unknown ........................... stays INTENDED: the next unwind
                                                       calls it again under the same key
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agentsaga import crashpoints, telemetry
from agentsaga.errors import (
    CompensationUnavailable,
    InvalidArguments,
    OutcomeUnknown,
    Rejected,
    UnknownTool,
)
from agentsaga.keys import compensation_key
from agentsaga.saga import contracts, corrections
from agentsaga.saga.registry import JSON, Registry, as_effect
from agentsaga.saga.resolution_report import ResolutionReport
from agentsaga.saga.tool_schema import CALL_AGAIN, check_arguments
from agentsaga.states import UNSETTLED, CompensationStatus, StepStatus
from agentsaga.store import Step
from agentsaga.store.base import to_stored_json
from agentsaga.store.interfaces import JobStore
from agentsaga.waiting import waiting

DEFERRED_MARK = '"$deferred"'
"""How an upstream's value filled in at unwind time shows in a stored compensation."""

NOT_DECLARED = "needs a person: "
"""How the error of a step whose compensation was refused as undeclared begins (it waits for a
person: `agentsaga.saga.resolution.waiting_for_humans`)."""

logger = logging.getLogger(__name__)


@dataclass
class Unwinder:
    saga_log: JobStore  # what an unwind Job may write (agentsaga.store.interfaces)
    registry: Registry

    # -- unwind (R8) -------------------------------------------------------------------------

    def unwind(self, run_id: str, epoch: int, report: ResolutionReport) -> None:
        steps = self.saga_log.steps(run_id, newest_first=True)
        refs = {s.idempotency_key: s.external_ref for s in steps}
        for step in steps:
            entry = {"step_idx": step.step_idx, "tool": step.tool}
            if step.status == StepStatus.COMPENSATED:
                report.skipped.append({**entry, "why": "compensated before"})
                continue
            if step.status != StepStatus.CONFIRMED:
                if step.status not in UNSETTLED:
                    report.skipped.append({**entry, "why": str(step.status)})
                continue
            if step.tool_class == "irreversible":
                self._queue(step, epoch, report)
                continue
            if step.comp_status == CompensationStatus.FAILED:
                report.failed.append({**entry, "why": step.error or "compensation rejected"})
                continue
            self._compensate(step, epoch, refs, report)

    def _queue(self, step: Step, epoch: int, report: ResolutionReport) -> None:
        correction = corrections.plan(step)
        self.saga_log.record_correction(epoch, correction)
        if step.comp_status != CompensationStatus.QUEUED:
            self.saga_log.record_compensation(step.run_id, epoch, step.step_idx,
                                              CompensationStatus.QUEUED)
        report.queued.append({"step_idx": step.step_idx, "tool": step.tool,
                              "state": str(correction.state), "audience": correction.audience})

    def _compensate(self, step: Step, epoch: int, refs: dict[str, str | None],
                    report: ResolutionReport) -> None:
        with telemetry.compensation_span(step):
            self._compensate_in_span(step, epoch, refs, report)

    def _compensate_in_span(self, step: Step, epoch: int, refs: dict[str, str | None],
                            report: ResolutionReport) -> None:
        entry: dict[str, Any] = {"step_idx": step.step_idx, "tool": step.tool}
        comp = step.compensation
        if not comp:
            report.failed.append({**entry, "why": "no compensation stored in the row"})
            return
        comp_tool = str(comp["tool"])
        undeclared = self._undeclared(step)
        if undeclared is not None:  # never run: a person looks at it (R6)
            why = f"{NOT_DECLARED}compensation {comp_tool} not run: {undeclared}"
            self.saga_log.record_compensation(step.run_id, epoch, step.step_idx,
                                              CompensationStatus.FAILED, error=why)
            report.failed.append({**entry, "compensation": comp_tool, "why": why})
            return
        try:
            spec = self.registry.get(comp_tool)
        except UnknownTool as exc:
            report.failed.append({**entry, "why": str(exc)})
            return
        comp_key = compensation_key(step.run_id, step.step_idx, step.tool)
        args = resolve_refs(comp.get("args") or {}, refs)
        try:  # never called with arguments its tool refuses: a person decides (R6)
            if DEFERRED_MARK not in json.dumps(args):  # filled in by the tool itself
                check_arguments(spec, args)
        except InvalidArguments as exc:
            why = f"compensation {comp_tool} cannot run: {str(exc).removesuffix(CALL_AGAIN)}"
            self.saga_log.record_compensation(step.run_id, epoch, step.step_idx,
                                              CompensationStatus.FAILED, error=why)
            report.failed.append({**entry, "compensation": comp_tool, "why": why})
            return
        # R8: the intent to compensate is durable before the call; a restart re-runs it
        self.saga_log.record_compensation(step.run_id, epoch, step.step_idx,
                                          CompensationStatus.INTENDED, comp_key=comp_key)
        try:
            with waiting():
                effect = as_effect(spec.fn(**args, idempotency_key=comp_key))
        except Rejected as exc:
            self.saga_log.record_compensation(step.run_id, epoch, step.step_idx,
                                              CompensationStatus.FAILED,
                                              error=f"compensation {comp_tool} rejected: {exc}")
            report.failed.append({**entry, "compensation": comp_tool, "why": str(exc)})
            return
        except Exception as exc:  # OutcomeUnknown and surprises: maybe; retry on next unwind
            level = logging.INFO if isinstance(exc, OutcomeUnknown) else logging.WARNING
            logger.log(level, "compensation %s outcome unknown: %s", comp_tool, exc,
                       extra={"run_id": step.run_id, "step": step.step_idx, "tool": comp_tool,
                              "key": comp_key})
            report.pending.append({**entry, "compensation": comp_tool,
                                   "why": f"{type(exc).__name__}: {exc}"})
            return
        crashpoints.reach(f"after_compensation:{comp_tool}")
        result = None if effect is None else effect.result
        self.saga_log.record_compensation(step.run_id, epoch, step.step_idx,
                                          CompensationStatus.DONE, comp_result=result,
                                          compensated=True)
        correction = corrections.plan(step)
        self.saga_log.record_correction(epoch, correction)
        report.compensated.append({**entry, "compensation": comp_tool, "ref": step.external_ref,
                                   "correction": str(correction.state)})


    def _undeclared(self, step: Step) -> str | None:
        """Why the step's stored compensation is not the one its tool declares in this deploy
        (`agentsaga.saga.contracts`), or None when it is: rebuilt from the registry's current
        declaration and the arguments the step was last sent with, it must be the stored one,
        and the contract the step ran under must undo the same way as today's."""
        try:
            spec = self.registry.get(step.tool)
        except UnknownTool:
            return f"tool {step.tool!r} is not registered in this deploy"
        mine = [a for a in self.saga_log.attempts(step.run_id) if a.step_idx == step.step_idx]
        args = dict(mine[-1].args if mine else step.args)
        try:
            built = spec.build_compensation(args, step.idempotency_key)
        except CompensationUnavailable as exc:
            return f"its tool cannot rebuild it from the step's arguments ({exc})"
        if step.contract_hash:  # a row without one is refused below
            current, version = contracts.versioned(spec, self.registry,
                                                   None if built is None else built.tool)
            if version != step.contract_hash and (
                    step.contract is None
                    or contracts.undo_part(step.contract) != contracts.undo_part(current)):
                return (f"tool {step.tool!r} declares its compensation differently since the "
                        f"step ran (contract {step.contract_hash}, now {version})")
        rebuilt = None if built is None else to_stored_json(built.to_json())[1]
        if rebuilt != step.compensation:
            return (f"the stored compensation is not the one tool {step.tool!r} declares for "
                    f"the step's arguments (stored: {_shown(step.compensation)}; declared: "
                    f"{_shown(rebuilt)})")
        if not step.contract_hash:
            # every intent records its contract's version (R6); a row without one was not
            # written by a dispatch, so nothing says the compensation is what ran under it
            return (f"the step carries no version of tool {step.tool!r}'s contract, so "
                    "nothing says its compensation is the one it ran under (a row written "
                    "outside a dispatch, or before contracts were recorded); a person checks "
                    "the effect and undoes it")
        return None


def _shown(compensation: Any) -> str:
    if not compensation:
        return "none"
    args = json.dumps(compensation.get("args") or {}, sort_keys=True, separators=(",", ":"))
    return f"{compensation.get('tool')} {args}"


def resolve_refs(value: Any, refs: Mapping[str, str | None]) -> Any:
    """Replace `ref(key)` placeholders with that step's external id (None if it has none)."""
    if isinstance(value, dict):
        if set(value) == {"$ref"}:
            return refs.get(str(value["$ref"]))
        return {k: resolve_refs(v, refs) for k, v in value.items()}
    if isinstance(value, list):
        return [resolve_refs(v, refs) for v in value]
    return value


class _AnyId(dict[str, str]):
    """Every key's external id, as a stand-in: what an id will be (a string) is all that is
    known before the call."""

    def get(self, key: str, default: Any = None) -> str:
        return "id-of-" + key


def compensation_problem(registry: Registry, compensation: JSON) -> str | None:
    """Why the compensation could not run as it is written (its tool would refuse its
    arguments), checked before the forward call (R6) with each `ref(key)` taken as an id; None
    when it can, or when part of it is filled in only at unwind time (an upstream's deferred
    value: its own tool checks it then)."""
    if DEFERRED_MARK in json.dumps(compensation.get("args") or {}):
        return None
    try:
        check_arguments(registry.get(str(compensation["tool"])),
                        resolve_refs(compensation.get("args") or {}, _AnyId()))
    except InvalidArguments as exc:
        return str(exc).removesuffix(CALL_AGAIN).rstrip(".")
    return None
