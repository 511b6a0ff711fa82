"""Unwind (R8, R9): walk a run's log backwards, reading the log, never the transcript (R11).
The rows were reconciled first (R7, `agentsaga.reconcile`).

    not CONFIRMED, or already COMPENSATED ............ skipped
    irreversible ..................................... a correction, queued for a human
    compensation FAILED before ....................... left for a human
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

from agentsaga import corrections, crashpoints, telemetry
from agentsaga.errors import InvalidArguments, OutcomeUnknown, Rejected, UnknownTool
from agentsaga.keys import compensation_key
from agentsaga.registry import JSON, Registry, as_effect
from agentsaga.settle_report import SettleReport
from agentsaga.states import UNSETTLED, CompensationStatus, StepStatus
from agentsaga.store import SagaLog, Step
from agentsaga.tool_schema import CALL_AGAIN, check_arguments
from agentsaga.waiting import waiting

DEFERRED_MARK = '"$deferred"'
"""How an upstream's value filled in at unwind time shows in a stored compensation."""

logger = logging.getLogger(__name__)


@dataclass
class Unwinder:
    saga_log: SagaLog
    registry: Registry

    # -- unwind (R8) -------------------------------------------------------------------------

    def unwind(self, run_id: str, epoch: int, report: SettleReport) -> None:
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

    def _queue(self, step: Step, epoch: int, report: SettleReport) -> None:
        correction = corrections.plan(step)
        self.saga_log.record_correction(epoch, correction)
        if step.comp_status != CompensationStatus.QUEUED:
            self.saga_log.record_compensation(step.run_id, epoch, step.step_idx,
                                              CompensationStatus.QUEUED)
        report.queued.append({"step_idx": step.step_idx, "tool": step.tool,
                              "state": str(correction.state), "audience": correction.audience})

    def _compensate(self, step: Step, epoch: int, refs: dict[str, str | None],
                    report: SettleReport) -> None:
        with telemetry.compensation_span(step):
            self._compensate_in_span(step, epoch, refs, report)

    def _compensate_in_span(self, step: Step, epoch: int, refs: dict[str, str | None],
                            report: SettleReport) -> None:
        entry: dict[str, Any] = {"step_idx": step.step_idx, "tool": step.tool}
        comp = step.compensation
        if not comp:
            report.failed.append({**entry, "why": "no compensation stored in the row"})
            return
        comp_tool = str(comp["tool"])
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
