"""Corrections a human approves with kubectl (R9), the same way as the pivot:

    kubectl patch agentrun refund-1182 --subresource=status --type=merge -p \\
      '{"status":{"corrections":{"3":{"approval":{"decision":"Approved","approver":"alice"}}}}}'

The operator records the decision in the saga log (`agentsaga.saga.corrections.decide`, once per
correction), shows it in `status.corrections`, consumes the approval, and for an approved
correction starts a Job that sends it (`agentsaga corrections --run RUN --send`): the operator
never talks to a real system itself. The path every human input takes is `human_input`'s; this
module declares what is a correction's.
"""

from __future__ import annotations

from agentsaga.errors import CorrectionError
from agentsaga.operator import approval_trust, human_input, job_manifests, run_facts, run_jobs
from agentsaga.operator.context import Context
from agentsaga.operator.human_input import Outcome, Recorded, Refused
from agentsaga.operator.status import Obj, generation, run_id, with_condition
from agentsaga.saga import corrections
from agentsaga.states import CorrectionState
from agentsaga.store import Correction
from agentsaga.store.interfaces import OperatorStore


def record(saga_log: OperatorStore, run: Obj, step: str, approval: Obj) -> Correction:
    if not step.isdigit():
        raise CorrectionError(f"correction key {step!r} is not a step number")
    return corrections.decide(
        saga_log, run_id(run), int(step), str(approval.get("decision")),
        str(approval.get("approver") or ""), str(approval.get("reason") or ""))


def patch(run: Obj, step: str, approval: Obj, outcome: Outcome[Correction]) -> Obj:
    """The approval consumed from the entry, and the decision (or why there is none) shown."""
    entry = ((run.get("status") or {}).get("corrections") or {}).get(step) or {}
    update: Obj = {**entry, "approval": None}
    if isinstance(outcome, Refused):
        message = outcome.detail
        if outcome.reason == approval_trust.REASON:
            message = (f"correction approval by {approval.get('approver')!r} not recorded: "
                       f"{message}")
        reason = outcome.reason if outcome.reason == approval_trust.REASON else "Refused"
    else:
        state = str(outcome.value.state)
        update.update(state=state, decidedBy=approval.get("approver"), decidedAt=outcome.at)
        message = f"correction for step {step} {state.lower()} by {approval.get('approver')}"
        reason = "Decided"
    return {"corrections": {step: update}, "message": message,
            "observedGeneration": generation(run),
            "conditions": with_condition(run, "CorrectionsDecided", reason == "Decided",
                                         reason, message)}


def then(ctx: Context, run: Obj, step: str, approval: Obj, outcome: Outcome[Correction]) -> None:
    """An approved correction is sent by a Job."""
    if isinstance(outcome, Recorded) and outcome.value.state == CorrectionState.APPROVED:
        start_job(ctx, run, step)


def start_job(ctx: Context, run: Obj, step: str) -> None:
    """The Job that sends the run's approved corrections, named by the step (409: it exists)."""
    job = job_manifests.job_name(run["metadata"]["name"], "corrections", int(step), mark="s")
    run_jobs.create_job(ctx, run, "corrections", job)


def ensure_jobs(ctx: Context, run: Obj, facts: run_facts.RunFacts) -> None:
    """Resync: every approved correction has its Job, even if the operator stopped between
    recording the decision and creating the Job."""
    for step, entry in facts.corrections.items():
        if entry.get("state") in ("Approved", "Sending"):
            start_job(ctx, run, step)


CORRECTION_APPROVAL = human_input.HumanInput(
    field="corrections", handler_id="correction-approval",
    guarded_name=approval_trust.APPROVER, record=record, patch=patch, then=then, keyed=True,
    entry_of=lambda entry: entry.get("approval"))
corrections_changed = human_input.watch(CORRECTION_APPROVAL)
