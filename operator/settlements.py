"""A person settles a step no lookup can settle (R7), with `kubectl patch`, the same way as an
approval (the approver role; the admission policy binds `settler` to the requesting user):

    kubectl patch agentrun refund-1182 --subresource=status --type=merge -p \\
      '{"status":{"settlements":{"3":{"outcome":"Happened","ref":"SM123","settler":"alice",
        "reason":"delivery report","stepKey":"<the step's key>"}}}}'

The operator records it in the saga log once (`agentsaga.saga.human_settlement.settle`: the step
key must be the step's, the step UNKNOWN), and only while the API server binds the settler's
name to the requesting user, as for an approval (`approval_trust`: the admission policy bound
with Deny); it marks the entry `Recorded` (or removes it, with a `StepsSettled=False` condition
saying why), and when nothing waits for a person any more and
the run's last reconcile or unwind Job stopped for one, starts that Job again. It never talks to
a real system itself. The path every human input takes is `human_input`'s; this module declares
what is a settlement's.
"""

from __future__ import annotations

import logging

from agentsaga.errors import SettlementError
from agentsaga.operator import approval_trust, human_input, job_manifests, run_facts, run_jobs
from agentsaga.operator.context import Context
from agentsaga.operator.human_input import Outcome, Recorded, Refused
from agentsaga.operator.status import Obj, generation, parse, run_id, with_condition
from agentsaga.saga import human_settlement
from agentsaga.store import Settled
from agentsaga.store.interfaces import OperatorStore

logger = logging.getLogger(__name__)

RECORDED = "Recorded"


def record(saga_log: OperatorStore, run: Obj, step: str, entry: Obj) -> Settled:
    if not step.isdigit():
        raise SettlementError(f"settlement key {step!r} is not a step number")
    if not entry.get("stepKey"):
        raise SettlementError(
            f"the settlement of step {step} names no stepKey: copy the step's key from "
            "`agentsaga log --run RUN` (it guards against settling the wrong step)")
    return human_settlement.settle(
        saga_log, run_id(run), int(step),
        human_settlement.outcome(str(entry.get("outcome") or "")),
        settler=str(entry.get("settler") or ""), reason=str(entry.get("reason") or ""),
        ref=entry.get("ref") or None, step_key=str(entry["stepKey"]))


def patch(run: Obj, step: str, entry: Obj, outcome: Outcome[Settled]) -> Obj:
    """The entry marked Recorded, or removed with the reason it was refused."""
    who = entry.get("settler")
    update: Obj | None
    if isinstance(outcome, Refused):
        refused = (f"not recorded: {outcome.detail}" if outcome.reason == approval_trust.REASON
                   else outcome.detail)
        message = f"settlement of step {step} by {who} refused: {refused}"
        update = None
    else:
        message = f"step {step} settled as {entry.get('outcome')} by {who}"
        update = {**entry, "state": RECORDED, "recordedAt": outcome.at}
    return {"settlements": {step: update}, "message": message,
            "observedGeneration": generation(run),
            "conditions": with_condition(run, "StepsSettled", update is not None,
                                         "Recorded" if update is not None else "Refused",
                                         message)}


def then(ctx: Context, run: Obj, step: str, entry: Obj, outcome: Outcome[Settled]) -> None:
    if isinstance(outcome, Recorded):
        logger.info("agentrun %s/%s: step %s settled by %s", run["metadata"].get("namespace"),
                    run["metadata"]["name"], step, entry.get("settler"))
        resume(ctx, run)


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


STEP_SETTLEMENT = human_input.HumanInput(
    field="settlements", handler_id="step-settlement", guarded_name=approval_trust.SETTLER,
    record=record, patch=patch, then=then, keyed=True,
    waiting=lambda entry: entry.get("state") != RECORDED)
settlements_changed = human_input.watch(STEP_SETTLEMENT)
