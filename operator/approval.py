"""The pivot approval (R10): a human patches `status.approval`; the operator checks it against
the staged plan, records the decision in the saga log (`agentsaga.pivot.record_decision`) and
in `status.pivot`, sets the `PivotApproved` or `PivotRejected` condition, and consumes the
approval (a changed plan needs a new one). A rejection unwinds the run.

    kubectl patch agentrun refund-1182 --subresource=status --type=merge \\
      -p '{"status":{"approval":{"planHash":"<hash>","decision":"Approved","approver":"alice"}}}'
"""

from __future__ import annotations

import logging
from typing import Any

import kopf

from agentsaga import pivot
from agentsaga.errors import PivotError
from agentsaga.operator import approval_trust, run_jobs
from agentsaga.operator.config import AGENTRUNS
from agentsaga.operator.context import Context, context
from agentsaga.operator.run_binding import same_namespace
from agentsaga.operator.status import Obj, generation, run_id, stamp, with_condition

logger = logging.getLogger(__name__)


def refusal(run: Obj, approval: Obj) -> tuple[str, str] | None:
    """(reason, message) when the approval cannot be honoured; None when it can."""
    staged = (run.get("status") or {}).get("pivot") or {}
    decision, plan_hash = approval.get("decision"), approval.get("planHash")
    if decision not in ("Approved", "Rejected"):
        return "InvalidApproval", f"decision {decision!r}: use Approved or Rejected"
    if not approval.get("approver"):
        return "InvalidApproval", "the approval names no approver"
    if staged.get("state") != "AwaitingApproval":
        return ("StaleApproval", f"approval of plan {plan_hash!r} refused: the run is not "
                f"awaiting approval (pivot state {staged.get('state') or 'None'})")
    if plan_hash != staged.get("planHash"):
        return ("StaleApproval", f"approval of plan {plan_hash!r} refused: the staged plan is "
                f"{staged.get('planHash')!r}; review it and approve that hash")
    return None


def _record(ctx: Context, run: Obj, approval: Obj) -> tuple[str, str] | None:
    """Record the decision in the saga log; a refusal (reason, message) if it cannot be."""
    if ctx.saga_log is None:
        return None
    logged = ctx.saga_log.run(run_id(run))
    if logged is not None and not same_namespace(logged, run["metadata"].get("namespace", "")):
        return ("RunInOtherNamespace", "spec.runId names a run of another namespace; an "
                "AgentRun decides only runs of its own namespace. Nothing was recorded.")
    try:
        pivot.record_decision(ctx.saga_log, run_id(run), approval["planHash"],
                              approval["decision"], approval["approver"],
                              approval.get("reason", ""))
    except PivotError as exc:
        # Recorded already (the operator stopped before it wrote the status)? Then go on.
        record = ctx.saga_log.require_run(run_id(run)).pivot
        recorded = (None, None, None) if record is None else (
            record.plan_hash, record.decision, record.decided_by)
        if recorded != (approval["planHash"], approval["decision"], approval["approver"]):
            return "StaleApproval", str(exc)
    return None


def _trust(ctx: Context, run: Obj, approval: Obj) -> tuple[str, str] | None:
    """A refusal when the API server does not bind approvals on `run` to their approver."""
    why = approval_trust.check(ctx.kube, run=run)
    if why is None:
        return None
    return (approval_trust.REASON,
            f"approval by {approval.get('approver')!r} not recorded: {why}")


def decide(ctx: Context, namespace: str, name: str) -> None:
    run = ctx.kube.get_run(namespace, name)
    approval = None if run is None else (run.get("status") or {}).get("approval")
    if run is None or not approval:
        return
    refused = (refusal(run, approval) or _trust(ctx, run, approval)
               or _record(ctx, run, approval))

    def mutate(current: Obj) -> Obj | None:
        status = current.get("status") or {}
        if status.get("approval") != approval:
            return None  # a newer approval arrived: its own event decides it
        if refused is not None:
            reason, message = refused
            decided = (status.get("pivot") or {}).get("decision")
            if decided and reason == "StaleApproval":
                # the plan was decided already (an approval sent twice, a late rejection):
                # consumed, and the decision's conditions stand
                return {"approval": None, "observedGeneration": generation(current),
                        "message": f"{message}; it stays {decided}"}
            return {"approval": None, "observedGeneration": generation(current),
                    "conditions": with_condition(current, "PivotApproved", False, reason,
                                                 message)}
        approved = approval["decision"] == "Approved"
        who = approval["approver"]
        message = (f"plan {approval['planHash']} {approval['decision'].lower()} by {who}"
                   + (f": {approval['reason']}" if approval.get("reason") else ""))
        conditions = with_condition(current, "PivotApproved", approved,
                                    "Approved" if approved else "Rejected", message)
        conditions = with_condition(current, "PivotRejected", not approved,
                                    "Rejected" if not approved else "Approved", message,
                                    conditions)
        return {
            "approval": None, "observedGeneration": generation(current),
            "conditions": conditions, "message": message,
            **({"phase": "Committing"} if approved else {}),
            "pivot": {**(status.get("pivot") or {}), "state": approval["decision"],
                      "decision": approval["decision"], "decidedBy": who,
                      "decidedAt": stamp(), "reason": approval.get("reason", "")},
        }

    written = ctx.kube.update_status(namespace, name, mutate)
    if written is not None and refused is None and approval["decision"] == "Rejected":
        run_jobs.start_job(ctx, written, "unwind",
                          frozenset({"Pending", "Running", "AwaitingApproval", "Committing"}),
                          "the plan was rejected at the pivot")


@kopf.on.field(*AGENTRUNS, field="status.approval", id="pivot-approval")
def approval_changed(new: Any, namespace: str | None, name: str, memo: Any,
                     **_: Any) -> None:
    if new and namespace is not None:
        decide(context(memo), namespace, name)
