"""The AgentRun lifecycle: a resync daemon per unfinished AgentRun reconciles its status with the
saga log (R11) and with its pod. It passes on change, not on a timer: watch events of the object
and a batched check of the saga log (`log_watch`) wake it; finished runs have no daemon.

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

from agentsaga.operator import correction_approval, pods, run_facts, run_jobs, settlements
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
from agentsaga.saga import pivot
from agentsaga.states import CORRECTIONS_PENDING, DECIDED, ENDED_PHASE, RunPhase, RunState
from agentsaga.store import PivotRecord

logger = logging.getLogger(__name__)




TIMED_PHASES = frozenset({RunPhase.ORPHANED, *JOB_PHASES})
"""Phases where time matters (the orphan grace period, a Job to follow or re-create): their
daemon passes every AGENTSAGA_OPERATOR_RESYNC_SECONDS, as they are few and short-lived."""


def needs_daemon(body: kopf.Body, **_: Any) -> bool:
    """A run has a resync daemon while it is unfinished, or finished with corrections that still
    wait for a human or a sender; a finished run costs nothing (no daemon, no polling)."""
    status = body.get("status") or {}
    if phase(body) not in FINAL_PHASES:
        return True
    return any(str(c.get("state")) in CORRECTIONS_PENDING
               for c in (status.get("corrections") or {}).values() if isinstance(c, dict))


@kopf.on.event(*AGENTRUNS, id="run-changed")
async def run_changed(type: str | None, name: str, namespace: str | None, body: kopf.Body,
                      memo: Any, **_: Any) -> None:
    """A watch event of an AgentRun wakes its daemon (not its own status write, nor kopf's
    bookkeeping) and keeps the pod → runs index (`run_pods`).

    A listing (`type` None: the operator's start, or a relist after its watches were cut, as
    after an API server restart or a 410 Gone) wakes every live run's daemon even if the
    object did not change: a pod deleted while the watches were down sends no event, and the
    pass (`pods.bound_pod_gone`) is what finds it gone."""
    if namespace is not None:
        ctx = context(memo)
        ctx.runs_by_pod.seen(namespace, name, None if type == "DELETED" else dict(body))
        if type is None and (not phase(body) or phase(body) in LIVE_PHASES):
            ctx.log_watch.wake((namespace, name))
        else:
            ctx.log_watch.object_changed((namespace, name), dict(body))


@kopf.daemon(*AGENTRUNS, id="resync", cancellation_timeout=5.0, when=needs_daemon)
async def resync(name: str, namespace: str | None, memo: Any, stopped: kopf.DaemonStopped,
                 logger: kopf.Logger, **_: Any) -> None:
    """Passes when the run's object or its saga log changed (`log_watch`), every resync
    interval in the timed phases, and otherwise when the bounded resync's walk reaches it
    (once per full-resync period), for what no event reports (a pod deleted while a watch was
    down)."""
    ctx = context(memo)
    if namespace is None:
        return
    key = (namespace, name)
    ctx.gauges.started(namespace, name)
    ctx.log_watch.register(key, name)
    found: run_facts.RunFacts | None = None  # the last pass's facts (unchanged: not read again)
    try:
        while not stopped:
            wait: float | None = None  # until an event, the log watch or the walk wakes it
            try:
                seen, found = await asyncio.to_thread(resync_pass, ctx, namespace, name, found)
                ctx.gauges.resynced(namespace, name, seen)
                if seen is not None:
                    ctx.log_watch.register(key, run_id(seen))
                    ctx.log_watch.passed(key, None if found is None
                                         else run_facts.fingerprint(found), seen)
                    if phase(seen) in TIMED_PHASES or not phase(seen):
                        wait = ctx.config.resync_seconds
            except Exception as exc:  # the next pass retries; the API or Postgres may be back
                logger.warning("resync of %s/%s failed: %s", namespace, name, exc)
                wait = ctx.config.resync_seconds
            await ctx.log_watch.sleep(key, lambda: stopped.wait(), wait)
    finally:  # finished, deleted, or paused by peering: another replica (or nobody) reports it
        ctx.log_watch.unregister(key)
        ctx.gauges.stopped(namespace, name)


def resync_pass(ctx: Context, namespace: str, name: str,
                previous: run_facts.RunFacts | None = None
                ) -> tuple[Obj | None, run_facts.RunFacts | None]:
    """`resync_once`, and the saga-log facts it read (the log watch's baseline, and the next
    pass's `previous`)."""
    read: list[run_facts.RunFacts | None] = [None]
    seen = resync_once(ctx, namespace, name, read, previous)
    return seen, read[0]


def resync_once(ctx: Context, namespace: str, name: str,
                read: list[run_facts.RunFacts | None] | None = None,
                previous: run_facts.RunFacts | None = None) -> Obj | None:
    """One pass of the resync: the AgentRun's status made to show the log and its pod; returns
    the run as this pass left it (None: gone or being deleted). `read` receives the facts;
    `previous`, the facts of the run's last pass, are not read again if the log's fingerprint
    of the run did not move since."""
    run = ctx.kube.get_run(namespace, name)
    if run is None or run["metadata"].get("deletionTimestamp"):
        return None
    current = phase(run)
    facts = None if ctx.saga_log is None else run_facts.facts_since(
        ctx.saga_log, run_id(run), previous, namespace)
    if facts is not None and facts.other_namespace:
        # an AgentRun naming another namespace's run sees nothing of it and decides nothing
        ctx.kube.update_status(namespace, name, lambda obj: None if (condition(
            obj, "RunLinked") or {}).get("reason") == "RunInOtherNamespace" else {
            "conditions": other_namespace_condition(obj)})
        return run
    rejected = ((run.get("status") or {}).get("pivot") or {}).get("state") == "Rejected"
    acted = True  # the object may have changed since `run` was read
    if current in LIVE_PHASES and rejected and not (run.get("status") or {}).get("job"):
        # the decision was written but the operator stopped before starting the unwind
        run_jobs.start_job(ctx, run, "unwind", LIVE_PHASES, "the plan was rejected at the pivot")
    elif not current or current in LIVE_PHASES:
        gone = None if facts is not None and facts.finished else pods.bound_pod_gone(ctx, run)
        if gone is not None:
            run_jobs.orphan(ctx, namespace, name, *gone)
        acted = gone is not None or bool(facts and any(
            c.get("state") in ("Approved", "Sending") for c in facts.corrections.values()))
    elif current == "Orphaned":
        run_jobs.maybe_start_job(ctx, run)
    elif current in JOB_PHASES:
        run_jobs.follow_job(ctx, run)
    if facts is not None:  # an approved correction whose Job was never created (a crash)
        correction_approval.ensure_jobs(ctx, run, facts)
    if facts is not None and current == RunPhase.FAILED:  # settled by `agentsaga settle`
        settlements.resume(ctx, run, facts)

    def mutate(newest: Obj) -> Obj | None:
        # the log read after the newest object: a decision written to the log and then to
        # the object in between (a handler's) is never undone by facts read before it
        # (`run` itself when this pass changed nothing: its facts were read after it)
        fresh = None if ctx.saga_log is None else facts if newest is run else (
            run_facts.facts_since(ctx.saga_log, run_id(newest), facts))
        if read is not None:
            read[0] = fresh
        return reflect(newest, fresh)

    # a pass that changed nothing reads the object once (the write is a compare-and-swap)
    written = ctx.kube.update_status(namespace, name, mutate, known=None if acted else run)
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
        if (condition(run, "RunLinked") or {}).get("status") == "False":
            # the namespace's own run began since: this AgentRun shows it now
            patch["conditions"] = with_condition(
                run, "RunLinked", True, "Linked", f"the AgentRun shows run {db.run_id}",
                patch.get("conditions"))
        patch.update(run_facts.shown_patch(status, facts))
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
    """The saga log's pivot record in the CRD's status.pivot shape: every step, each commit
    step's arguments whole with card numbers masked (`agentsaga.saga.pivot.shown`; a plan too large
    to show whole was refused at staging)."""
    if record is None or not record.plan_hash:
        return None
    return pivot.shown(record)
