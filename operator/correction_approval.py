"""Corrections a human approves with kubectl (R9), the same way as the pivot:

    kubectl patch agentrun refund-1182 --subresource=status --type=merge -p \\
      '{"status":{"corrections":{"3":{"approval":{"decision":"Approved","approver":"alice"}}}}}'

The operator records the decision in the saga log (`agentsaga.corrections.decide`, once per
correction), shows it in `status.corrections`, consumes the approval, and for an approved
correction starts a Job that sends it (`agentsaga corrections --run RUN --send`): the operator
never talks to a real system itself.
"""

from __future__ import annotations

import logging
from typing import Any

import kopf

from agentsaga import corrections
from agentsaga.errors import CorrectionError
from agentsaga.operator import approval_trust, job_manifests, run_facts, run_jobs
from agentsaga.operator.config import AGENTRUNS
from agentsaga.operator.context import Context, context
from agentsaga.operator.status import Obj, generation, run_id, stamp, with_condition

logger = logging.getLogger(__name__)


def decide(ctx: Context, namespace: str, name: str, step: str, approval: Obj) -> None:
    run = ctx.kube.get_run(namespace, name)
    if run is None or ctx.saga_log is None:
        return
    untrusted = approval_trust.check(ctx.kube, run=run)
    if untrusted is not None:
        refused: str | None = (f"correction approval by {approval.get('approver')!r} not "
                               f"recorded: {untrusted}")
        state = None
    elif not step.isdigit():
        refused = f"correction key {step!r} is not a step number"
        state = None
    else:
        try:
            decided = corrections.decide(
                ctx.saga_log, run_id(run), int(step), str(approval.get("decision")),
                str(approval.get("approver") or ""), str(approval.get("reason") or ""))
            refused, state = None, decided.state
        except CorrectionError as exc:
            refused, state = str(exc), None

    def mutate(current: Obj) -> Obj | None:
        entries = (current.get("status") or {}).get("corrections") or {}
        entry = entries.get(step) or {}
        if entry.get("approval") != approval:
            return None  # consumed already, or a newer decision arrived
        update: Obj = {**entry, "approval": None}
        if state is not None:
            update.update(state=state, decidedBy=approval.get("approver"), decidedAt=stamp())
        message = refused or (f"correction for step {step} {state.lower() if state else ''} "
                              f"by {approval.get('approver')}")
        return {"corrections": {step: update}, "message": message,
                "observedGeneration": generation(current),
                "conditions": with_condition(
                    current, "CorrectionsDecided", refused is None,
                    (approval_trust.REASON if untrusted else "Refused") if refused
                    else "Decided", message)}

    written = ctx.kube.update_status(namespace, name, mutate)
    if written is not None and state == "Approved":
        start_job(ctx, written, step)


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


@kopf.on.field(*AGENTRUNS, field="status.corrections", id="correction-approval")
def corrections_changed(new: Any, namespace: str | None, name: str, memo: Any,
                        **_: Any) -> None:
    if not new or namespace is None:
        return
    for step, entry in sorted(new.items()):
        approval = (entry or {}).get("approval")
        if approval:
            decide(context(memo), namespace, name, str(step), approval)
