"""The operator is the only writer to the Kubernetes API: it learns of runs from the saga log
and binds their AgentRuns (the sidecar holds no Kubernetes credentials), and acts on the
effects a late call found after a run ended (`late_effects`).

A run that begins or changes owner in the log is announced on the runs' Postgres channel, whose
name only the operator's role may read (triggers, migrations 007 and 017); the operator LISTENs,
and binds what no notification announced in bounded rounds (`run_walk`: every open run at
start-up, a slice of them per AGENTSAGA_OPERATOR_RESYNC_SECONDS). For each run with a namespace
(a sidecar in a pod), it

- creates the AgentRun in the run's namespace (not for a run that ended without a step before
  it was bound: it has nothing to show or decide), or adopts the one there (`spec.runId` must name
  the run: an AgentRun of another run is left alone with a condition). A run of a namespace is
  `namespace/run-id` in the log (a run id is unique within its namespace); its AgentRun's
  `spec.runId` is the bare id. An AgentRun a person deleted (once its run was settled, past
  the finalizer) is not made again: the run's copied policy says it was bound once;
- writes `status.pod` (name, uid, namespace), `status.ownerEpoch` and phase Running when the
  log's owner epoch is newer than the status's (R12), clearing an Orphaned condition;
- copies the AgentRun's spec policy (irreversibleBeforePivot, pivot.required, onOrphan,
  orphanGracePeriodSeconds) into the log, where the sidecar reads it (R10).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import kopf

from agentsaga import telemetry
from agentsaga.keys import split_log_run_id
from agentsaga.operator import late_effects
from agentsaga.operator.context import Context, context
from agentsaga.operator.run_walk import OpenRunWalk
from agentsaga.operator.status import (
    Obj,
    agentrun_name,
    generation,
    run_id,
    stamp,
    with_condition,
)
from agentsaga.store import Run

logger = logging.getLogger(__name__)

POLICY_FIELDS = ("irreversibleBeforePivot", "pivot", "onOrphan", "orphanGracePeriodSeconds")
"""The AgentRun spec fields copied into the log (`saga_runs.policy`)."""


def bind(ctx: Context, run: Run) -> Obj | None:
    """Create or adopt the run's AgentRun, bind it to the run's pod at the log's epoch, and copy
    its spec policy into the log. None for a run outside Kubernetes (no namespace)."""
    if not run.namespace or ctx.saga_log is None:
        return None
    _, bare = split_log_run_id(run.run_id)
    name = agentrun_name(bare)
    known = ctx.kube.get_run(run.namespace, name)  # one GET when bound already
    if known is None and run.policy is not None:
        # its AgentRun was bound once (the policy was copied from it) and is gone: a person
        # deleted it (past the finalizer); it is not made again
        return None
    if known is None and not run.open and ctx.saga_log.newest_step(run.run_id) is None:
        # begun and ended before the operator saw it running, without a step: nothing to show,
        # decide or unwind, so no AgentRun (runs begun and ended at once make no objects; runs
        # with steps are bounded in Postgres, migration 020)
        return None
    if known is None and ctx.kube.create_run(run.namespace, {
        "apiVersion": "agentsaga.io/v1alpha1", "kind": "AgentRun",
        "metadata": {"name": name, "namespace": run.namespace,
                     "annotations": telemetry.run_annotations(run.trace_context or {})},
        "spec": {"agent": run.agent or "agent", "runId": bare},
    }):
        logger.info("created AgentRun %s/%s for run %s", run.namespace, name, run.run_id)

    def mutate(current: Obj) -> Obj | None:
        if run_id(current) != run.run_id:
            return None  # another run's AgentRun: never bound to this one
        status = current.get("status") or {}
        shown = int(status.get("ownerEpoch") or 0)
        bound = (status.get("pod") or {}).get("uid")
        if not run.pod_uid or shown > run.owner_epoch or (
                bound == run.pod_uid and shown == run.owner_epoch):
            return None  # bound already (the resync may have shown the epoch first)
        message = f"pod {run.owner} holds the run (owner epoch {run.owner_epoch})"
        conditions = [c for c in status.get("conditions") or [] if c.get("type") != "Orphaned"]
        if any(c.get("type") == "Orphaned" for c in status.get("conditions") or []):
            conditions.append({
                "type": "Orphaned", "status": "False", "reason": "Adopted", "message": message,
                "lastTransitionTime": stamp(), "observedGeneration": generation(current)})
        live = status.get("phase") in (None, "", "Pending", "Running", "Orphaned")
        return {"pod": {"name": run.owner, "uid": run.pod_uid, "namespace": run.namespace},
                "ownerEpoch": run.owner_epoch, "conditions": conditions, "message": message,
                **({"phase": "Running", "orphanedAt": None, "orphanReason": None}
                   if live else {})}

    written = ctx.kube.update_status(run.namespace, name, mutate, known=known)
    current = written or known or ctx.kube.get_run(run.namespace, name)
    if current is not None and run_id(current) == run.run_id:
        copy_policy(ctx, run, current)
        _annotate_trace(ctx, run, current)
    return current


def _annotate_trace(ctx: Context, run: Run, agentrun: Obj) -> None:
    """An AgentRun made by someone else (kubectl apply) gets the run's trace annotation unless
    it has one: the operator and the Jobs continue the run's first trace."""
    annotations = telemetry.run_annotations(run.trace_context or {})
    present = (agentrun.get("metadata") or {}).get("annotations") or {}
    if annotations and telemetry.ANNOTATION not in present:
        ctx.kube.annotate_run(run.namespace, agentrun["metadata"]["name"], annotations)


def copy_policy(ctx: Context, run: Run, agentrun: Obj) -> None:
    """The AgentRun's spec policy into the log (the operator's database role only)."""
    spec = agentrun.get("spec") or {}
    policy = {k: spec[k] for k in POLICY_FIELDS if k in spec}
    # the approval time-to-live as it holds for this run: the sidecar and the log's trigger
    # (migration 019) read it there
    policy["pivot"] = {"approvalTtlSeconds": ctx.config.approval_ttl_seconds,
                       **(policy.get("pivot") or {})}
    if ctx.saga_log is not None and run.policy != policy:
        ctx.saga_log.set_policy(run.run_id, policy)


def same_namespace(run: Run, namespace: str) -> bool:
    """An AgentRun is linked only to a run of its own namespace (`status.run_id` names one
    always; this holds the log's row to it)."""
    return run.namespace == namespace


def other_namespace_condition(body: Obj) -> list[Obj]:
    return with_condition(
        body, "RunLinked", False, "RunInOtherNamespace",
        "spec.runId names a run of another namespace; an AgentRun shows and decides only runs "
        "of its own namespace")


# -- the loop: LISTEN, with a periodic resync ----------------------------------------------


def follow_log(ctx: Context, stop: threading.Event) -> None:
    """Until `stop`: bind the AgentRun of every run the log announces, and in each round
    without a notification those of `run_walk` (after a lost LISTEN connection: every open
    run again). The rounds run on the LISTEN connection's thread while it stays open, so a
    notification sent during one waits for it instead of being lost."""
    saga_log = ctx.saga_log
    if saga_log is None:
        return
    walk = OpenRunWalk(saga_log, ctx.config)
    while not stop.is_set():
        try:
            saga_log.listen_runs(lambda run_id: _bind_id(ctx, run_id, walk), stop.is_set,
                                 timeout=ctx.config.resync_seconds,
                                 on_quiet=lambda listening: _round(ctx, walk, listening))
        except Exception as exc:  # Postgres or the API went away: resync once they are back
            logger.warning("following the saga log: %s", exc)
            walk.lost()
            stop.wait(min(5.0, ctx.config.resync_seconds))


def _round(ctx: Context, walk: OpenRunWalk, listening: bool) -> None:
    """One round of `run_walk`; when the LISTEN connection has just started listening (start-up,
    a lost connection: notifications may have been missed), the late effects of ended runs too,
    swept once it listens, so that one announced meanwhile is either swept or heard."""
    for run in walk.round():
        if not _bind_quietly(ctx, run):
            walk.failed.add(run.run_id)
    if listening:
        late_effects.sweep(ctx)


def _bind_id(ctx: Context, run_id: str, walk: OpenRunWalk) -> None:
    run = None if ctx.saga_log is None else ctx.saga_log.run(run_id)
    if run is not None and not _bind_quietly(ctx, run):
        walk.failed.add(run_id)
    if run is not None and not run.open:  # an ended run announced: a late call's effect?
        late_effects.act_quietly(ctx, run_id)


def _bind_quietly(ctx: Context, run: Run) -> bool:
    try:
        bind(ctx, run)
    except Exception as exc:  # one run's trouble never stops the others; the next round retries
        logger.warning("binding the AgentRun of run %s: %s", run.run_id, exc)
        return False
    return True


_STOP = threading.Event()


@kopf.on.startup(id="follow-saga-log")
def start_following(memo: Any, **_: Any) -> None:
    ctx = context(memo)
    if ctx.saga_log is None:
        return
    _STOP.clear()
    threading.Thread(target=follow_log, args=(ctx, _STOP), name="agentsaga-log-follower",
                     daemon=True).start()


@kopf.on.cleanup(id="stop-following-saga-log")
def stop_following(**_: Any) -> None:
    _STOP.set()
