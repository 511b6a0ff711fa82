"""A person settles a step no lookup can settle (R7), with `kubectl patch`, the same way as an
approval (the approver role; the admission policy binds `settler` to the requesting user):

    kubectl patch agentrun refund-1182 --subresource=status --type=merge -p \\
      '{"status":{"settlements":{"3":{"outcome":"Happened","ref":"SM123","settler":"alice",
        "reason":"delivery report","stepKey":"<the step's key>"}}}}'

The operator records it in the saga log once (`agentsaga.human_settlement.settle`: the step
key must be the step's, the step UNKNOWN), and only while the API server binds the settler's
name to the requesting user, as for an approval (`approval_trust`: the admission policy bound
with Deny); it marks the entry `Recorded` (or removes it, with a `StepsSettled=False` condition
saying why), and when nothing waits for a person any more and
the run's last reconcile or unwind Job stopped for one, starts that Job again. It never talks to
a real system itself.
"""

from __future__ import annotations

import logging
from typing import Any

import kopf

from agentsaga import human_settlement
from agentsaga.errors import SettlementError
from agentsaga.operator import approval_trust, job_manifests, run_facts, run_jobs
from agentsaga.operator.config import AGENTRUNS
from agentsaga.operator.context import Context, context
from agentsaga.operator.status import Obj, generation, parse, run_id, stamp, with_condition

logger = logging.getLogger(__name__)

RECORDED = "Recorded"


def record(ctx: Context, namespace: str, name: str, step: str, entry: Obj) -> None:
    run = ctx.kube.get_run(namespace, name)
    if run is None or ctx.saga_log is None:
        return
    refused: str | None = None
    if not step.isdigit():
        refused = f"settlement key {step!r} is not a step number"
    elif not entry.get("stepKey"):
        refused = (f"the settlement of step {step} names no stepKey: copy the step's key from "
                   "`agentsaga log --run RUN` (it guards against settling the wrong step)")
    elif (why := approval_trust.check(ctx.kube, approval_trust.SETTLER, run)) is not None:
        refused = f"not recorded: {why}"
    else:
        try:
            human_settlement.settle(
                ctx.saga_log, run_id(run), int(step),
                human_settlement.outcome(str(entry.get("outcome") or "")),
                settler=str(entry.get("settler") or ""), reason=str(entry.get("reason") or ""),
                ref=entry.get("ref") or None, step_key=str(entry["stepKey"]))
        except SettlementError as exc:
            refused = str(exc)

    def mutate(current: Obj) -> Obj | None:
        entries = (current.get("status") or {}).get("settlements") or {}
        if entries.get(step) != entry:
            return None  # consumed already, or a newer settlement arrived
        who = entry.get("settler")
        if refused is not None:
            message = f"settlement of step {step} by {who} refused: {refused}"
            update: Obj | None = None
        else:
            message = f"step {step} settled as {entry.get('outcome')} by {who}"
            update = {**entry, "state": RECORDED, "recordedAt": stamp()}
        return {"settlements": {step: update}, "message": message,
                "observedGeneration": generation(current),
                "conditions": with_condition(current, "StepsSettled", refused is None,
                                             "Refused" if refused else "Recorded", message)}

    written = ctx.kube.update_status(namespace, name, mutate)
    if written is not None and refused is None:
        logger.info("agentrun %s/%s: step %s settled by %s", namespace, name, step,
                    entry.get("settler"))
        resume(ctx, written)


def resume(ctx: Context, run: Obj, facts: run_facts.RunFacts | None = None) -> None:
    """Once nothing waits for a person, start the reconcile or unwind Job again if the last
    one stopped for one and a person settled a step since it ended (here, or with `agentsaga
    settle`; its phase is Failed; the next Job adopts the run, R12)."""
    if ctx.saga_log is None:
        return
    facts = facts or run_facts.facts(ctx.saga_log, run_id(run))
    job = (run.get("status") or {}).get("job") or {}
    finished = parse(job.get("finishedAt"))
    if (facts.awaiting_human or job.get("state") != "Failed" or finished is None
            or facts.last_settled_at is None or facts.last_settled_at <= finished):
        return
    kind: job_manifests.JobKind = "reconcile" if job.get("kind") == "reconcile" else "unwind"
    run_jobs.start_job(ctx, run, kind, frozenset({"Failed"}),
                       "a person settled the steps the last Job could not")


@kopf.on.field(*AGENTRUNS, field="status.settlements", id="step-settlement")
def settlements_changed(new: Any, namespace: str | None, name: str, memo: Any,
                        **_: Any) -> None:
    if not new or namespace is None:
        return
    for step, entry in sorted(new.items()):
        if entry and entry.get("state") != RECORDED:
            record(context(memo), namespace, name, str(step), dict(entry))
