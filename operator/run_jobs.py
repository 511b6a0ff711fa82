"""Orphaned runs: mark them, and past `spec.orphanGracePeriodSeconds` with no pod adopting,
start the reconcile or unwind Job (`spec.onOrphan`), then follow it to its end.

Restart-safe: every decision reads the AgentRun's status, which is written (compare-and-swap)
before the Job is created; the Job's name is deterministic, so creating it twice is a 409.
"""

from __future__ import annotations

import datetime
import logging
from typing import Any

import kopf

from agentsaga import crashpoints, telemetry
from agentsaga.operator import job_manifests, run_facts
from agentsaga.operator.config import DEFAULT_ORPHAN_GRACE_SECONDS, JOB_KIND_LABEL, RUN_LABEL
from agentsaga.operator.context import Context, context
from agentsaga.operator.status import (
    LIVE_PHASES,
    Obj,
    generation,
    parse,
    phase,
    run_id,
    with_condition,
)
from agentsaga.states import CompensationStatus, RunState, StepStatus

logger = logging.getLogger(__name__)

JOB_PHASE = {"reconcile": "Reconciling", "unwind": "Unwinding"}
JOB_CONDITION = {"reconcile": "Reconciled", "unwind": "Unwound"}


def precise() -> str:
    """A timestamp with microseconds (grace periods of a second or two must be honest)."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _facts(ctx: Context, run: Obj) -> run_facts.RunFacts | None:
    return None if ctx.saga_log is None else run_facts.facts(
        ctx.saga_log, run_id(run), run["metadata"].get("namespace", ""))


def trace_context(run: Obj) -> dict[str, str] | None:
    """The run's trace, from the AgentRun annotation the sidecar wrote when the run began."""
    parent = ((run.get("metadata") or {}).get("annotations") or {}).get(telemetry.ANNOTATION)
    return {"traceparent": parent} if parent else None


def orphan(ctx: Context, namespace: str, name: str, pod_name: str, pod_uid: str, reason: str,
           message: str) -> bool:
    """The run's pod is gone while the run is unfinished: phase Orphaned, with why and when."""

    def mutate(run: Obj) -> Obj | None:
        status = run.get("status") or {}
        if phase(run) and phase(run) not in LIVE_PHASES:
            return None
        bound = status.get("pod") or {}
        if bound.get("uid") and pod_uid and bound["uid"] != pod_uid:
            return None  # another pod adopted the run: this one's end changes nothing
        if bound.get("name") and bound["name"] != pod_name:
            return None
        facts = _facts(ctx, run)
        if facts is not None and facts.finished:
            return None  # the run ended in the log; the resync reflects how
        spec = run.get("spec") or {}
        policy = spec.get("onOrphan", "unwind")
        then = ("a human decides (onOrphan=wait)" if policy == "wait"
                else f"a {policy} Job starts")
        # the pod went before its bind was shown: the status names it now, at the log's
        # epoch, so that the bind arriving late is no adoption (only a newer epoch is)
        logged = None if facts is None else facts.run
        unbound: Obj = ({"pod": {"name": pod_name, "uid": pod_uid, "namespace": namespace},
                         "ownerEpoch": logged.owner_epoch}
                        if logged is not None and pod_uid and not bound.get("uid")
                        and logged.pod_uid == pod_uid else {})
        if ctx.saga_log is not None and pod_uid:
            # R12: the pod is gone; another pod may adopt the run now (BeginRun checks this).
            # Released before the status says Orphaned, which tells a person or a new pod that
            # the run can be adopted (a release repeated by a retried write changes nothing)
            ctx.saga_log.release_pod(run_id(run), pod_uid)
        return {
            **unbound,
            "phase": "Orphaned", "orphanedAt": precise(), "orphanReason": message,
            "observedGeneration": generation(run),
            "conditions": with_condition(run, "Orphaned", True, reason, message),
            "message": f"{message}; if no pod adopts the run within "
                       f"{spec.get('orphanGracePeriodSeconds', 60)}s, {then}",
        }

    written = ctx.kube.update_status(namespace, name, mutate)
    if written is not None:
        with telemetry.operator_span("orphan", run_id(written), trace_context(written),
                                     attributes={"agentsaga.orphan.reason": reason}):
            logger.info("agentrun %s/%s orphaned: %s", namespace, name, message)
    return written is not None


def grace_over(run: Obj, now: datetime.datetime) -> bool:
    status = run.get("status") or {}
    orphaned_at = parse(status.get("orphanedAt")) or now
    grace = int((run.get("spec") or {}).get("orphanGracePeriodSeconds",
                                           DEFAULT_ORPHAN_GRACE_SECONDS))
    return now >= orphaned_at + datetime.timedelta(seconds=grace)


def handled(run: Obj) -> bool:
    """A Job was already started for this orphaning (restarts and peers must not start one)."""
    status = run.get("status") or {}
    started = parse((status.get("job") or {}).get("startedAt"))
    orphaned_at = parse(status.get("orphanedAt"))
    return started is not None and (orphaned_at is None or started >= orphaned_at)


def maybe_start_job(ctx: Context, run: Obj) -> None:
    policy = (run.get("spec") or {}).get("onOrphan", "unwind")
    if policy == "wait" or handled(run):
        return
    if not grace_over(run, datetime.datetime.now(datetime.UTC)):
        return
    start_job(ctx, run, policy, frozenset({"Orphaned"}),
              f"no pod adopted the run within its grace period (onOrphan={policy})")


def start_job(ctx: Context, run: Obj, kind: job_manifests.JobKind, expect: frozenset[str],
              why: str) -> None:
    """Record the Job in status (CAS), then create it; a crash in between is repaired by
    `follow_job`, which creates the recorded Job if it is missing."""
    namespace, name = run["metadata"]["namespace"], run["metadata"]["name"]
    facts = _facts(ctx, run)
    epoch = (facts.run.owner_epoch if facts is not None and facts.run is not None
             else int((run.get("status") or {}).get("ownerEpoch") or 0))
    job_name = job_manifests.job_name(name, kind, epoch)

    def mutate(current: Obj) -> Obj | None:
        if phase(current) not in expect:
            return None
        if phase(current) == "Orphaned" and (handled(current) or not grace_over(
                current, datetime.datetime.now(datetime.UTC))):
            return None
        return {
            "phase": JOB_PHASE[kind],
            "job": {"name": job_name, "kind": kind, "state": "Created", "startedAt": precise(),
                    "finishedAt": None},
            "observedGeneration": generation(current),
            "conditions": with_condition(
                current, JOB_CONDITION[kind], "Unknown", "JobStarted",
                f"job {job_name} runs `agentsaga {kind} --run {run_id(current)}`: {why}"),
            "message": f"{why}; job {job_name} started",
        }

    written = ctx.kube.update_status(namespace, name, mutate)
    if written is None:
        return
    crashpoints.reach("operator:after_job_recorded")
    with telemetry.operator_span("job_start", run_id(written), trace_context(written),
                                 attributes={"k8s.job.name": job_name}, job_kind=kind):
        create_job(ctx, written, kind, job_name)


def create_job(ctx: Context, run: Obj, kind: job_manifests.JobKind, job_name: str) -> None:
    namespace, name = run["metadata"]["namespace"], run["metadata"]["name"]
    try:
        manifest = job_manifests.build_job(run, kind, job_name, run_id(run), ctx.config,
                                  ctx.sidecar_template)
    except ValueError as exc:
        _job_failed(ctx, namespace, name, job_name, kind, "JobNotCreated", str(exc))
        return
    if ctx.kube.create_job(namespace, manifest):
        logger.info("created job %s/%s (%s of run %s)", namespace, job_name, kind, run_id(run))


def follow_job(ctx: Context, run: Obj) -> None:
    """Resync of a run in Reconciling/Unwinding: the recorded Job exists, and its end shows."""
    namespace = run["metadata"]["namespace"]
    recorded = (run.get("status") or {}).get("job") or {}
    if not recorded.get("name") or recorded.get("state") in ("Succeeded", "Failed"):
        return
    job = ctx.kube.get_job(namespace, recorded["name"])
    if job is None:
        create_job(ctx, run, recorded.get("kind", "unwind"), recorded["name"])
        return
    apply_job(ctx, namespace, run["metadata"]["name"], job)


def apply_job(ctx: Context, namespace: str, name: str, job: Obj) -> None:
    result = job_manifests.outcome(job)
    job_name = job["metadata"]["name"]

    def mutate(run: Obj) -> Obj | None:
        recorded = (run.get("status") or {}).get("job") or {}
        if recorded.get("name") != job_name or recorded.get("state") == result:
            return None
        if recorded.get("state") in ("Succeeded", "Failed"):
            return None
        kind = recorded.get("kind", "unwind")
        patch: Obj = {"job": {**recorded, "state": result}, "observedGeneration": generation(run)}
        if result == "Running" or result == "Created":
            return patch
        patch["job"]["finishedAt"] = precise()
        facts = _facts(ctx, run)
        if facts is not None:  # a final phase has no resync after it: the log shown whole
            patch.update(run_facts.shown_patch(run.get("status") or {}, facts))
        needs = _needs_human(facts)
        # an unwind that finished but exits non-zero because a person must act (a correction
        # to decide; `agentsaga unwind` exits 3): the log says the run is unwound (R11)
        unwound = (kind == "unwind" and facts is not None and facts.run is not None
                   and facts.run.state == RunState.UNWOUND)
        if result == "Failed" and not unwound:
            message = f"job {job_name} failed; see `kubectl logs job/{job_name}`{needs}"
            patch.update(phase="Failed", message=message, conditions=with_condition(
                run, JOB_CONDITION[kind], False, "JobFailed", message))
            return patch
        done = "unwound" if kind == "unwind" else "reconciled"
        message = f"job {job_name} {done} the run{needs or ': nothing needs a human'}"
        patch.update(
            phase="Unwound" if kind == "unwind" else "Orphaned", message=message,
            conditions=with_condition(run, JOB_CONDITION[kind], not needs,
                                      "NeedsHuman" if needs else "JobSucceeded", message))
        return patch

    ctx.kube.update_status(namespace, name, mutate)


def _needs_human(facts: run_facts.RunFacts | None) -> str:
    if facts is None:
        return ""
    parts = []
    if facts.awaiting_human:
        steps = ", ".join(str(s) for s in facts.awaiting_human)
        parts.append(f"step(s) {steps} wait for a person to settle them (no lookup can): "
                     "`agentsaga settle`, or status.settlements")
    if facts.unsettled:
        parts.append("unsettled: " + run_facts.describe_unsettled(facts.unsettled))
    refused = [s for s in facts.steps if s.status == StepStatus.CONFIRMED
               and s.comp_status == CompensationStatus.FAILED]
    parts += [f"step {s.step_idx} {s.tool} was not compensated: {s.error or 'failed'}"
              for s in refused]
    if facts.corrections:
        parts.append(f"{len(facts.corrections)} correction(s) await a human "
                     f"(steps {', '.join(facts.corrections)})")
    return "; " + "; ".join(parts) if parts else ""


def _job_failed(ctx: Context, namespace: str, name: str, job_name: str, kind: str, reason: str,
                message: str) -> None:
    def mutate(run: Obj) -> Obj | None:
        return {"phase": "Failed", "message": message,
                "job": {**((run.get("status") or {}).get("job") or {}), "state": "Failed",
                        "finishedAt": precise()},
                "conditions": with_condition(run, JOB_CONDITION[kind], False, reason, message)}

    ctx.kube.update_status(namespace, name, mutate)


@kopf.on.event("batch", "v1", "jobs", labels={JOB_KIND_LABEL: kopf.PRESENT}, id="job-progress")
def job_progress(type: str, body: kopf.Body, namespace: str | None, memo: Any,
                 logger: kopf.Logger, **_: Any) -> None:
    """The job controller's view of a reconcile/unwind Job → the AgentRun's status."""
    if type == "DELETED" or namespace is None:
        return
    run_name = (body.get("metadata") or {}).get("annotations", {}).get(RUN_LABEL)
    if run_name:
        apply_job(context(memo), namespace, run_name, dict(body))
