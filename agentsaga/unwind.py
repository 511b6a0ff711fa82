"""Reconcile a whole run (R7) and unwind it (R8, R9), reading the log, never the transcript (R11).

    reconcile_run   adopt the run (R12), then settle every INTENDED/UNKNOWN row by key: one
                    batched lookup per tool, a pause, one re-check of what was not found
    unwind_run      reconcile, then walk the log backwards:
        not CONFIRMED, or already COMPENSATED ............ skipped
        irreversible ..................................... a correction, queued for a human
        compensation FAILED before ....................... left for a human
        otherwise ........................................ comp INTENDED (durable) -> call the
                                                           compensation under its own key ->
                                                           DONE + COMPENSATED (+ a Silent or
                                                           Proposed correction by audience)
        the compensation is rejected ..................... comp FAILED, reported
        its outcome is unknown ........................... stays INTENDED: the next unwind
                                                           calls it again under the same key

Both return a `SettleReport`; `settled` is False while anything is left for a human or a retry.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agentsaga import corrections, crashpoints, telemetry
from agentsaga.errors import OutcomeUnknown, Rejected, UnknownTool
from agentsaga.keys import compensation_key
from agentsaga.log import SagaLog, Step
from agentsaga.registry import Effect, Registry, as_effect

log = logging.getLogger(__name__)


@dataclass
class SettleReport:
    run_id: str
    action: str
    epoch: int = 0
    reconciled: list[dict[str, Any]] = field(default_factory=list)
    compensated: list[dict[str, Any]] = field(default_factory=list)
    queued: list[dict[str, Any]] = field(default_factory=list)
    failed: list[dict[str, Any]] = field(default_factory=list)
    pending: list[dict[str, Any]] = field(default_factory=list)
    unsettled: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)
    corrections: list[dict[str, Any]] = field(default_factory=list)
    state: str = ""

    @property
    def settled(self) -> bool:
        return not (self.failed or self.pending or self.unsettled)

    def to_json(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "action": self.action, "epoch": self.epoch,
                "settled": self.settled, "state": self.state, "reconciled": self.reconciled,
                "compensated": self.compensated, "queued": self.queued, "failed": self.failed,
                "pending": self.pending, "unsettled": self.unsettled, "skipped": self.skipped,
                "corrections": self.corrections}

    def render(self) -> str:
        lines = [f"{self.action} of run {self.run_id} (epoch {self.epoch}): "
                 + ("settled" if self.settled else "NOT settled")]
        sections = [("found by key", self.reconciled), ("compensated", self.compensated),
                    ("queued as corrections", self.queued),
                    ("compensation failed (needs a human)", self.failed),
                    ("compensation outcome unknown (run unwind again)", self.pending),
                    ("still unknown (needs a human)", self.unsettled),
                    ("corrections (internal first)", self.corrections)]
        for title, items in sections:
            if items:
                lines.append(f"  {title}:")
                lines += [f"    {_line(item)}" for item in items]
        return "\n".join(lines)

    def pair(self) -> tuple[dict[str, Any], bool]:
        """The shape the sidecar's Reconcile/Unwind RPCs return."""
        return self.to_json(), self.settled


def _line(item: dict[str, Any]) -> str:
    head = f"step {item.get('step_idx')} {item.get('tool')}"
    rest = ", ".join(f"{k}={v}" for k, v in item.items() if k not in ("step_idx", "tool"))
    return f"{head}: {rest}" if rest else head


@dataclass
class Settler:
    log: SagaLog
    registry: Registry
    recheck_pause_s: float = 2.0
    sleep: Callable[[float], None] = time.sleep

    # -- reconcile (R7) ----------------------------------------------------------------------

    @telemetry.reconcile_traced
    def reconcile(self, run_id: str, epoch: int, report: SettleReport) -> None:
        rows = [s for s in self.log.steps(run_id) if not s.settled]
        if not rows:
            return
        found: dict[str, Effect] = {}
        failed: dict[str, str] = {}
        lookable = [s for s in rows if self._looks_up(s)]
        self._lookup(lookable, found, failed)
        missing = [s for s in lookable if s.idempotency_key not in found
                   and s.idempotency_key not in failed]
        if missing:  # search indexes lag: one re-check after a pause
            self.sleep(self.recheck_pause_s)
            self._lookup(missing, found, failed)
        for step in rows:
            key = step.idempotency_key
            entry = {"step_idx": step.step_idx, "tool": step.tool, "was": step.status}
            if key in found:
                effect = found[key]
                self.log.record_outcome(run_id, epoch, step.step_idx, "CONFIRMED",
                                        result=effect.result, external_ref=effect.ref)
                report.reconciled.append({**entry, "now": "CONFIRMED", "ref": effect.ref})
            elif key in failed or step not in lookable:
                why = failed.get(key, f"{step.tool} cannot be looked up by key")
                self.log.record_outcome(run_id, epoch, step.step_idx, "UNKNOWN", error=why)
                report.unsettled.append({**entry, "now": "UNKNOWN", "why": why})
            else:
                self.log.record_outcome(run_id, epoch, step.step_idx, "NOT_EXECUTED",
                                        error="not found by key after re-check")
                report.reconciled.append({**entry, "now": "NOT_EXECUTED"})

    def _looks_up(self, step: Step) -> bool:
        try:
            return self.registry.get(step.tool).lookup is not None
        except UnknownTool:
            return False

    @telemetry.lookup_traced
    def _lookup(self, steps: list[Step], found: dict[str, Effect],
                failed: dict[str, str]) -> None:
        by_tool: dict[str, list[Step]] = {}
        for step in steps:
            by_tool.setdefault(step.tool, []).append(step)
        for tool, group in by_tool.items():
            spec = self.registry.get(tool)
            keys = [s.idempotency_key for s in group]
            try:
                if spec.lookup_many is not None:
                    for key, value in spec.lookup_many(keys).items():
                        effect = as_effect(value)
                        if effect is not None and key in keys:
                            found[key] = effect
                else:
                    assert spec.lookup is not None
                    for key in keys:
                        effect = as_effect(spec.lookup(key))
                        if effect is not None:
                            found[key] = effect
            except Exception as exc:  # a lookup that fails leaves its rows UNKNOWN (R7)
                log.warning("lookup of %s failed: %s", tool, exc, extra={"tool": tool})
                for key in keys:
                    if key not in found:
                        failed[key] = f"lookup failed: {type(exc).__name__}: {exc}"

    # -- unwind (R8) -------------------------------------------------------------------------

    def unwind(self, run_id: str, epoch: int, report: SettleReport) -> None:
        steps = self.log.steps(run_id, newest_first=True)
        refs = {s.idempotency_key: s.external_ref for s in steps}
        for step in steps:
            entry = {"step_idx": step.step_idx, "tool": step.tool}
            if step.status == "COMPENSATED":
                report.skipped.append({**entry, "why": "compensated before"})
                continue
            if step.status != "CONFIRMED":
                if step.status not in ("UNKNOWN", "INTENDED"):
                    report.skipped.append({**entry, "why": step.status})
                continue
            if step.tool_class == "irreversible":
                self._queue(step, epoch, report)
                continue
            if step.comp_status == "FAILED":
                report.failed.append({**entry, "why": step.error or "compensation rejected"})
                continue
            self._compensate(step, epoch, refs, report)

    def _queue(self, step: Step, epoch: int, report: SettleReport) -> None:
        correction = corrections.plan(step)
        corrections.record(self.log, epoch, correction)
        if step.comp_status != "QUEUED":
            self.log.record_compensation(step.run_id, epoch, step.step_idx, "QUEUED")
        report.queued.append({"step_idx": step.step_idx, "tool": step.tool,
                              "state": correction.state, "audience": correction.audience})

    @telemetry.compensation_traced
    def _compensate(self, step: Step, epoch: int, refs: dict[str, str | None],
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
        # R8: the intent to compensate is durable before the call; a restart re-runs it
        self.log.record_compensation(step.run_id, epoch, step.step_idx, "INTENDED",
                                     comp_key=comp_key)
        try:
            effect = as_effect(spec.fn(**args, idempotency_key=comp_key))
        except Rejected as exc:
            self.log.record_compensation(step.run_id, epoch, step.step_idx, "FAILED",
                                         error=f"compensation {comp_tool} rejected: {exc}")
            report.failed.append({**entry, "compensation": comp_tool, "why": str(exc)})
            return
        except Exception as exc:  # OutcomeUnknown and surprises: maybe; retry on next unwind
            level = logging.INFO if isinstance(exc, OutcomeUnknown) else logging.WARNING
            log.log(level, "compensation %s outcome unknown: %s", comp_tool, exc)
            report.pending.append({**entry, "compensation": comp_tool,
                                   "why": f"{type(exc).__name__}: {exc}"})
            return
        crashpoints.reach(f"after_compensation:{comp_tool}")
        result = None if effect is None else effect.result
        self.log.record_compensation(step.run_id, epoch, step.step_idx, "DONE",
                                     comp_result=result, compensated=True)
        correction = corrections.plan(step)
        corrections.record(self.log, epoch, correction)
        report.compensated.append({**entry, "compensation": comp_tool, "ref": step.external_ref,
                                   "correction": correction.state})


def resolve_refs(value: Any, refs: dict[str, str | None]) -> Any:
    """Replace `ref(key)` placeholders with that step's external id (None if it has none)."""
    if isinstance(value, dict):
        if set(value) == {"$ref"}:
            return refs.get(str(value["$ref"]))
        return {k: resolve_refs(v, refs) for k, v in value.items()}
    if isinstance(value, list):
        return [resolve_refs(v, refs) for v in value]
    return value


def _finish(settler: Settler, report: SettleReport) -> SettleReport:
    report.corrections = [c.to_json() for c in corrections.for_run(settler.log, report.run_id)]
    run = settler.log.require_run(report.run_id)
    report.state = run.state
    return report


@telemetry.job_traced("reconcile")
def reconcile_run(log: SagaLog, registry: Registry, run_id: str, owner: str = "reconcile", *,
                  recheck_pause_s: float = 2.0,
                  sleep: Callable[[float], None] = time.sleep) -> SettleReport:
    """Adopt the run (bumping its epoch, R12) and settle its unsettled rows by key (R7)."""
    run = log.adopt(run_id, owner)
    settler = Settler(log, registry, recheck_pause_s, sleep)
    report = SettleReport(run_id, "reconcile", run.owner_epoch)
    settler.reconcile(run_id, run.owner_epoch, report)
    return _finish(settler, report)


@telemetry.job_traced("unwind")
def unwind_run(log: SagaLog, registry: Registry, run_id: str, owner: str = "unwind", *,
               recheck_pause_s: float = 2.0,
               sleep: Callable[[float], None] = time.sleep) -> SettleReport:
    """Adopt, reconcile, then compensate backwards and queue corrections (R8, R9)."""
    run = log.adopt(run_id, owner)
    epoch = run.owner_epoch
    log.set_run_state(run_id, epoch, "unwinding")
    settler = Settler(log, registry, recheck_pause_s, sleep)
    report = SettleReport(run_id, "unwind", epoch)
    settler.reconcile(run_id, epoch, report)
    settler.unwind(run_id, epoch, report)
    if report.settled:
        log.set_run_state(run_id, epoch, "unwound", end=True)
    return _finish(settler, report)
