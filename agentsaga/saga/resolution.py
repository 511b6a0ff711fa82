"""Resolving a whole run: reconcile it (R7), or reconcile and unwind it (R8, R9), as its owner.
(A run is resolved; a step is settled: its outcome made known, by a lookup or by a person,
`agentsaga.saga.human_settlement`.)

    reconcile_owned / unwind_owned   under the epoch the caller holds (the sidecar's Reconcile
                                     and Unwind RPCs: refused with Fenced once another writer
                                     adopted the run, R12)
    reconcile_run / unwind_run       adopt the run first, bumping its epoch (the operator's
                                     Jobs, `agentsaga reconcile|unwind`, the demo): the
                                     legitimate way to take a run over

Each returns a `ResolutionReport`. With `wait=`, a run whose only unsettled rows wait for their
certainty (R7: an empty lookup before the deadline plus the lag proves nothing) is resolved again
once that time has come, `wait(seconds, report)` doing the waiting (the command line shows a
countdown); without it the report says how long (`wait_s`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from agentsaga import telemetry
from agentsaga.saga.reconcile import Reconciler, settle_command
from agentsaga.saga.registry import Registry
from agentsaga.saga.resolution_report import Action, ResolutionReport
from agentsaga.saga.unwind import NOT_DECLARED, Unwinder
from agentsaga.states import CompensationStatus, CorrectionState, RunState, StepStatus
from agentsaga.store.interfaces import JobStore, Reads

Sleep = Callable[[float], None]
Wait = Callable[[float, ResolutionReport], None]


def reconcile_owned(saga_log: JobStore, registry: Registry, run_id: str, epoch: int, *,
                    recheck_pause_s: float = 2.0, sleep: Sleep = time.sleep) -> ResolutionReport:
    """Settle the run's unsettled rows by key (R7) under `epoch`."""
    return _resolve(saga_log, registry, run_id, epoch, "reconcile", recheck_pause_s, sleep)


def unwind_owned(saga_log: JobStore, registry: Registry, run_id: str, epoch: int, *,
                 recheck_pause_s: float = 2.0, sleep: Sleep = time.sleep) -> ResolutionReport:
    """Reconcile, then compensate backwards and queue corrections (R8, R9) under `epoch`."""
    return _resolve(saga_log, registry, run_id, epoch, "unwind", recheck_pause_s, sleep)


def reconcile_run(saga_log: JobStore, registry: Registry, run_id: str,
                  owner: str = "reconcile", *, recheck_pause_s: float = 2.0,
                  sleep: Sleep = time.sleep, wait: Wait | None = None) -> ResolutionReport:
    """Adopt the run (bumping its epoch, R12) and settle its unsettled rows by key (R7)."""
    epoch = saga_log.adopt(run_id, owner).owner_epoch
    return _until_certain(lambda: reconcile_owned(
        saga_log, registry, run_id, epoch, recheck_pause_s=recheck_pause_s, sleep=sleep), wait)


def unwind_run(saga_log: JobStore, registry: Registry, run_id: str, owner: str = "unwind", *,
               recheck_pause_s: float = 2.0, sleep: Sleep = time.sleep,
               wait: Wait | None = None) -> ResolutionReport:
    """Adopt the run (R12), reconcile, then compensate backwards and queue corrections."""
    epoch = saga_log.adopt(run_id, owner).owner_epoch
    return _until_certain(lambda: unwind_owned(
        saga_log, registry, run_id, epoch, recheck_pause_s=recheck_pause_s, sleep=sleep), wait)


def _until_certain(resolve: Callable[[], ResolutionReport],
                   wait: Wait | None) -> ResolutionReport:
    report = resolve()
    while wait is not None and report.wait_s is not None:
        wait(max(report.wait_s, 0.05), report)
        report = resolve()
    return report


def waiting_for_humans(saga_log: Reads, run_id: str) -> list[dict[str, Any]]:
    """Everything of the run that waits for a person, with the exact command for each: a step
    no lookup can settle, a step whose compensation is not the one its tool declares (never
    run: a person reads why and undoes it by hand), a Proposed correction (decide it), an
    approved one not sent yet."""
    waiting: list[dict[str, Any]] = []
    for row in saga_log.steps(run_id, newest_first=True):
        if (row.comp_status == CompensationStatus.FAILED and row.status == StepStatus.CONFIRMED
                and (row.error or "").startswith(NOT_DECLARED)):
            waiting.append({"step_idx": row.step_idx, "tool": row.tool,
                            "what": (row.error or "").removeprefix(NOT_DECLARED),
                            "command": f"agentsaga log --run {run_id}"})
    for item in saga_log.settlements(run_id, waiting_only=True):
        step = saga_log.step(run_id, item.step_idx)
        waiting.append({"step_idx": item.step_idx, "tool": step.tool if step else "",
                        "what": "step outcome unknown, no lookup can settle it",
                        "command": settle_command(run_id, item.step_idx)})
    for correction in saga_log.corrections(run_id, pending_only=True):
        if correction.state == CorrectionState.PROPOSED:
            what = "correction proposed, not decided"
            command = (f"agentsaga corrections --run {run_id} --approve {correction.step_idx}"
                       f" (or --dismiss {correction.step_idx})")
        else:
            what = f"correction {correction.state}, not sent"
            command = f"agentsaga corrections --run {run_id} --send --tools MODULE"
        waiting.append({"step_idx": correction.step_idx, "tool": correction.tool,
                        "what": what, "command": command})
    return waiting


def _resolve(saga_log: JobStore, registry: Registry, run_id: str, epoch: int, action: Action,
             recheck_pause_s: float, sleep: Sleep) -> ResolutionReport:
    with telemetry.job_span(action, saga_log, run_id) as span:
        saga_log.require_owner(run_id, epoch)  # R12: refused before any lookup or write
        report = ResolutionReport(run_id, action, epoch)
        if action == "unwind":
            saga_log.set_run_state(run_id, epoch, RunState.UNWINDING)
        reconciler = Reconciler(saga_log, registry, recheck_pause_s, sleep)
        report.add_reconciled(reconciler.settle_rows(run_id, epoch))
        if action == "unwind":
            Unwinder(saga_log, registry).unwind(run_id, epoch, report)
            if report.settled:
                saga_log.set_run_state(run_id, epoch, RunState.UNWOUND, end=True)
        report.corrections = [c.to_json() for c in saga_log.corrections(run_id)]
        report.waiting = waiting_for_humans(saga_log, run_id)
        report.state = str(saga_log.require_run(run_id).state)
        span.settled(report.settled)
        return report
