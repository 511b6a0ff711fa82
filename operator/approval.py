"""The pivot approval (R10): a human patches `status.approval`; the operator records the
decision in the saga log (`agentsaga.saga.pivot.record_decision`, the one validation of a pivot
decision) and in `status.pivot`, sets the `PivotApproved` or `PivotRejected` condition, and
consumes the approval (a changed plan needs a new one). A rejection unwinds the run.

    kubectl patch agentrun refund-1182 --subresource=status --type=merge \\
      -p '{"status":{"approval":{"planHash":"<hash>","decision":"Approved","approver":"alice"}}}'

The path every human input takes is `human_input`'s; this module declares what is the pivot's.
"""

from __future__ import annotations

from agentsaga.errors import ApprovalExpired, InvalidDecision, PivotError, SagaError
from agentsaga.operator import approval_trust, human_input, run_jobs
from agentsaga.operator.context import Context
from agentsaga.operator.human_input import Outcome, Recorded, Refused
from agentsaga.operator.status import Obj, generation, run_id, with_condition
from agentsaga.saga import pivot
from agentsaga.states import PivotState, RunPhase
from agentsaga.store import PivotRecord
from agentsaga.store.interfaces import OperatorStore

INVALID = "InvalidApproval"
STALE = "StaleApproval"
EXPIRED = "ApprovalExpired"


def record(saga_log: OperatorStore, run: Obj, key: str, approval: Obj) -> PivotRecord:
    """The decision, recorded by the core; one the log holds already while the status still
    shows the plan awaiting approval (the operator stopped before it wrote the status) is
    taken as recorded."""
    plan, decision = str(approval.get("planHash") or ""), str(approval.get("decision") or "")
    approver = str(approval.get("approver") or "")
    try:
        return pivot.record_decision(saga_log, run_id(run), plan, decision, approver,
                                     str(approval.get("reason") or ""), ttl=approval_ttl(run))
    except PivotError:
        logged = saga_log.run(run_id(run))
        shown = ((run.get("status") or {}).get("pivot") or {}).get("state")
        if (logged is not None and logged.pivot is not None
                and shown == PivotState.AWAITING_APPROVAL
                and pivot.recorded_as(logged.pivot, plan, decision, approver)):
            return logged.pivot
        raise


def approval_ttl(run: Obj) -> float | None:
    """The AgentRun's own `spec.pivot.approvalTtlSeconds`; None when it sets none (the run's
    policy in the log then holds the operator's default, which it copied there)."""
    value = (((run.get("spec") or {}).get("pivot")) or {}).get("approvalTtlSeconds")
    return float(value) if isinstance(value, int) and not isinstance(value, bool) else None


def refusal_reason(exc: SagaError) -> str:
    if isinstance(exc, ApprovalExpired):
        return EXPIRED
    return INVALID if isinstance(exc, InvalidDecision) else STALE


def patch(run: Obj, key: str, approval: Obj, outcome: Outcome[PivotRecord]) -> Obj:
    """The approval consumed, and the decision (or why there is none) shown."""
    status = run.get("status") or {}
    if isinstance(outcome, Refused):
        message = outcome.detail
        if outcome.reason == approval_trust.REASON:
            message = f"approval by {approval.get('approver')!r} not recorded: {message}"
        decided = (status.get("pivot") or {}).get("decision")
        if decided and outcome.reason == STALE:
            # the plan was decided already (an approval sent twice, a late rejection):
            # consumed, and the decision's conditions stand
            return {"approval": None, "observedGeneration": generation(run),
                    "message": f"{message}; it stays {decided}"}
        return {"approval": None, "observedGeneration": generation(run),
                "conditions": with_condition(run, "PivotApproved", False, outcome.reason,
                                             message)}
    decision, who = str(outcome.value.decision), str(outcome.value.decided_by)
    reason = outcome.value.reason or ""
    approved = decision == PivotState.APPROVED
    message = (f"plan {outcome.value.plan_hash} {decision.lower()} by {who}"
               + (f": {reason}" if reason else ""))
    conditions = with_condition(run, "PivotApproved", approved,
                                "Approved" if approved else "Rejected", message)
    conditions = with_condition(run, "PivotRejected", not approved,
                                "Rejected" if not approved else "Approved", message, conditions)
    return {
        "approval": None, "observedGeneration": generation(run),
        "conditions": conditions, "message": message,
        **({"phase": str(RunPhase.COMMITTING)} if approved else {}),
        "pivot": {**(status.get("pivot") or {}), "state": decision, "decision": decision,
                  "decidedBy": who, "decidedAt": outcome.at, "reason": reason},
    }


def then(ctx: Context, run: Obj, key: str, approval: Obj, outcome: Outcome[PivotRecord]) -> None:
    """A rejected plan unwinds the run."""
    if isinstance(outcome, Recorded) and outcome.value.decision == PivotState.REJECTED:
        run_jobs.start_job(ctx, run, "unwind",
                           frozenset({"Pending", "Running", "AwaitingApproval", "Committing"}),
                           "the plan was rejected at the pivot")


PIVOT_APPROVAL = human_input.HumanInput(
    field="approval", handler_id="pivot-approval", guarded_name=approval_trust.APPROVER,
    record=record, patch=patch, then=then, refusal_reason=refusal_reason)
approval_changed = human_input.watch(PIVOT_APPROVAL)
