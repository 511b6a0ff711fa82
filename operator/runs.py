"""The AgentRun lifecycle: one resync loop per AgentRun reconciles its status with the saga log
(R11) and with its pod.

Each pass reads the newest object and the log, then, by phase:
  new           → Pending (or Running once a pod is bound)
  Pending…      → Succeeded/Failed/Unwound when the log says the run ended; Orphaned when the
                  bound pod is gone (events missed while the operator was down);
                  AwaitingApproval when the sidecar staged a plan (R10)
  Orphaned      → a reconcile/unwind Job once the grace period is over (`run_jobs`)
  Reconciling…  → follows the recorded Job (re-creates it if a crash lost it)
and always reflects step counts, the owner epoch (R12), corrections and the pivot record.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import kopf
from agentsaga.operator import correction_approval, pods, run_facts, run_jobs
from agentsaga.operator.config import AGENTRUNS
from agentsaga.operator.context import Context, context
from agentsaga.operator.run_binding import other_namespace_condition
from agentsaga.operator.status import (
    FINAL_PHASES,
    JOB_PHASES,
    LIVE_PHASES,
    Obj,
    condition,
    generation,
    phase,
    run_id,
    with_condition,
)

from agentsaga import pivot
from agentsaga.states import DECIDED, ENDED_PHASE, RunPhase, RunState
from agentsaga.store import PivotRecord

logger = logging.getLogger(__name__)




@kopf.daemon(*AGENTRUNS, id="resync", cancellation_timeout=5.0)
async def resync(name: str, namespace: str | None, memo: Any, stopped: kopf.DaemonStopped,
                 logger: kopf.Logger, **_: Any) -> None:
    ctx = context(memo)
    if namespace is None:
        return
    ctx.gauges.started(namespace, name)
    try:
        while not stopped:
            try:
                seen = await asyncio.to_thread(resync_once, ctx, namespace, name)
                ctx.gauges.resynced(namespace, name, seen)
            except Exception as exc:  # the next pass retries; the API or Postgres may be back
                logger.warning("resync of %s/%s failed: %s", namespace, name, exc)
            await stopped.wait(ctx.config.resync_seconds)
    finally:  # deleted, or paused by peering: another replica (or nobody) reports it now
        ctx.gauges.stopped(namespace, name)


def resync_once(ctx: Context, namespace: str, name: str) -> Obj | None:
    """One pass of the resync: the AgentRun's status made to show the log and its pod; returns
    the run as this pass left it (None: gone or being deleted)."""
    run = ctx.kube.get_run(namespace, name)
    if run is None or run["metadata"].get("deletionTimestamp"):
        return None
    current = phase(run)
    facts = None if ctx.saga_log is None else run_facts.facts(ctx.saga_log, run_id(run),
                                                              namespace)
    if facts is not None and facts.other_namespace:
        # an AgentRun naming another namespace's run sees nothing of it and decides nothing
        ctx.kube.update_status(namespace, name, lambda obj: None if (condition(
            obj, "RunLinked") or {}).get("reason") == "RunInOtherNamespace" else {
            "conditions": other_namespace_condition(obj)})
        return run
    rejected = ((run.get("status") or {}).get("pivot") or {}).get("state") == "Rejected"
    if current in LIVE_PHASES and rejected and not (run.get("status") or {}).get("job"):
        # the decision was written but the operator stopped before starting the unwind
        run_jobs.start_job(ctx, run, "unwind", LIVE_PHASES, "the plan was rejected at the pivot")
    elif not current or current in LIVE_PHASES:
        if facts is None or not facts.finished:
            gone = pods.bound_pod_gone(ctx, run)
            if gone is not None:
                run_jobs.orphan(ctx, namespace, name, *gone)
    elif current == "Orphaned":
        run_jobs.maybe_start_job(ctx, run)
    elif current in JOB_PHASES:
        run_jobs.follow_job(ctx, run)
    if facts is not None:  # an approved correction whose Job was never created (a crash)
        correction_approval.ensure_jobs(ctx, run, facts)
    written = ctx.kube.update_status(namespace, name, lambda obj: reflect(obj, facts))
    return written or run


def reflect(run: Obj, facts: run_facts.RunFacts | None) -> Obj | None:
    """The status patch that makes `run` show what the log says (None: nothing to change)."""
    status = run.get("status") or {}
    patch: Obj = {}
    current = phase(run)
    if not current:
        patch["phase"] = "Running" if (status.get("pod") or {}).get("name") else "Pending"
        patch["conditions"] = with_condition(
            run, "Accepted", True, "Observed", "the operator tracks this run")
    if facts is not None and facts.run is not None:
        db = facts.run
        if status.get("steps") != facts.counts:
            patch["steps"] = facts.counts
        if status.get("ownerEpoch") != db.owner_epoch:
            patch["ownerEpoch"] = db.owner_epoch
        if status.get("irreversibleBeforePivot") != db.irreversible_before_pivot:
            patch["irreversibleBeforePivot"] = db.irreversible_before_pivot
        old = status.get("corrections") or {}
        if old != facts.corrections:
            patch["corrections"] = {**{k: None for k in old if k not in facts.corrections},
                                    **facts.corrections}
        pivot = pivot_status(db.pivot)
        known = status.get("pivot") or {}
        if pivot and (known.get("planHash"), known.get("state")) != (
                pivot.get("planHash"), pivot.get("state")) and known.get("state") not in DECIDED:
            patch["pivot"] = pivot
        live = current in LIVE_PHASES or not current
        if (live and db.state == RunState.AWAITING_APPROVAL
                and current != RunPhase.AWAITING_APPROVAL):
            patch["phase"] = str(RunPhase.AWAITING_APPROVAL)
        elif live and db.state in ENDED_PHASE and current not in FINAL_PHASES:
            patch["phase"] = str(ENDED_PHASE[db.state])
            patch["message"] = f"the run ended in the saga log ({db.state})"
    if status.get("observedGeneration") != generation(run):
        patch["observedGeneration"] = generation(run)
    return patch or None


def pivot_status(record: PivotRecord | None) -> Obj | None:
    """The saga log's pivot record in the CRD's status.pivot shape: masked arguments bounded in
    size, at most `pivot.SHOWN_STEPS` steps of each list (`agentsaga.pivot.shown`)."""
    if record is None or not record.plan_hash:
        return None
    return pivot.shown(record)
