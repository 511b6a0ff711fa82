"""What the operator reads from the saga log (R11: the log, not the pod, is the truth).

Read-only: the operator never writes a step and never holds a run's epoch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from agentsaga.keys import log_run_id, split_log_run_id
from agentsaga.states import STEP_COUNT_FIELD, UNSETTLED, CompensationStatus
from agentsaga.store import Correction, Run, Step
from agentsaga.store.fingerprints import LogFingerprint
from agentsaga.store.interfaces import OperatorStore


@dataclass(frozen=True)
class RunFacts:
    run: Run | None
    steps: list[Step] = field(default_factory=list)
    corrections: dict[str, dict[str, Any]] = field(default_factory=dict)
    awaiting_human: list[int] = field(default_factory=list)
    """Steps no lookup can settle, waiting for a person (`agentsaga settle`, or
    status.settlements)."""
    last_settled_at: datetime | None = None
    """When a person last settled a step of the run (by either way)."""
    human_steps: dict[str, dict[str, Any]] = field(default_factory=dict)
    """The same as the AgentRun's `status.humanSteps` shows them: tool, stepKey (to copy into
    a settlement), why."""
    other_namespace: bool = False
    """The run id names a run of another namespace: this AgentRun sees nothing of it."""

    @property
    def counts(self) -> dict[str, int]:
        out = {"total": len(self.steps), **{name: 0 for name in STEP_COUNT_FIELD.values()}}
        for step in self.steps:
            out[STEP_COUNT_FIELD[step.status]] += 1
        return out

    @property
    def unsettled(self) -> list[Step]:
        """Rows whose effect in the world is not known yet: INTENDED or UNKNOWN, or a
        compensation that was intended but has no recorded outcome."""
        return [s for s in self.steps
                if s.status in UNSETTLED or s.comp_status == CompensationStatus.INTENDED]

    @property
    def finished(self) -> bool:
        return self.run is not None and not self.run.open


def facts(saga_log: OperatorStore, run_id: str, namespace: str = "") -> RunFacts:
    """What the log says about the run (its saga-log id), as an AgentRun of `namespace` may see
    it: nothing of another namespace's run. With `namespace`, a run this namespace lacks that
    another one has (the AgentRun names another namespace's run) is `other_namespace`."""
    run = saga_log.run(run_id)
    if run is None:
        return RunFacts(None, other_namespace=bool(namespace) and _elsewhere(
            saga_log, run_id, namespace))
    if namespace and run.namespace != namespace:
        return RunFacts(None, other_namespace=True)
    steps = saga_log.steps(run_id)
    pending = sorted(saga_log.corrections(run_id, pending_only=True),
                     key=lambda c: (c.rank, c.step_idx))
    corrections = {str(c.step_idx): _shown(c) for c in pending}
    handed = saga_log.settlements(run_id)
    waiting = saga_log.settlements(run_id, waiting_only=True) if handed else []
    tools = {s.step_idx: s.tool for s in steps}
    shown = {str(w.step_idx): {"tool": tools.get(w.step_idx, ""), "stepKey": w.step_key,
                               "why": w.why} for w in waiting}
    settled = [h.settled_at for h in handed if h.settled_at is not None]
    return RunFacts(run, steps, corrections, [w.step_idx for w in waiting],
                    max(settled, default=None), shown)


def awaiting_human_column(steps: list[int]) -> str | None:
    """The AgentRun's `status.awaitingHuman` (printer column Human): the steps waiting for a
    person, as `3` or `3,5`; None when none waits."""
    return ",".join(str(s) for s in steps) or None


def shown_patch(status: dict[str, Any], found: RunFacts) -> dict[str, Any]:
    """The status fields that show the log's counts and what waits for a person (steps,
    ownerEpoch, irreversibleBeforePivot, awaitingHuman, humanSteps, corrections), as a merge
    patch of what `status` shows: the resync's, and the one that ends a Job's run in a final
    phase (no resync follows it: the status must be whole when it lands)."""
    db = found.run
    if db is None:
        return {}
    patch: dict[str, Any] = {}
    if status.get("steps") != found.counts:
        patch["steps"] = found.counts
    if status.get("ownerEpoch") != db.owner_epoch:
        patch["ownerEpoch"] = db.owner_epoch
    if status.get("irreversibleBeforePivot") != db.irreversible_before_pivot:
        patch["irreversibleBeforePivot"] = db.irreversible_before_pivot
    human = awaiting_human_column(found.awaiting_human)
    if status.get("awaitingHuman") != human:
        patch["awaitingHuman"] = human
    if "humanSteps" in status and not found.human_steps:
        patch["humanSteps"] = None  # nothing waits: the field goes
    elif (status.get("humanSteps") or {}) != found.human_steps:
        shown = status.get("humanSteps") or {}
        patch["humanSteps"] = {**{k: None for k in shown if k not in found.human_steps},
                               **found.human_steps}
    corrections = corrections_patch(status.get("corrections") or {}, found.corrections)
    if corrections:
        patch["corrections"] = corrections
    return patch


def corrections_patch(shown: dict[str, Any], pending: dict[str, dict[str, Any]]
                      ) -> dict[str, Any] | None:
    """The merge patch that makes status.corrections show the pending corrections. An entry
    carrying a human's `approval` is left for the correction-approval handler to consume (or
    refuse, with a condition), even when its correction no longer waits."""
    gone: dict[str, Any] = {k: None for k, v in shown.items()
                            if k not in pending and not (v or {}).get("approval")}
    changed = {k: v for k, v in pending.items()
               if {f: x for f, x in (shown.get(k) or {}).items() if f != "approval"} != v}
    return {**gone, **changed} or None


def _shown(correction: Correction) -> dict[str, Any]:
    """A correction as the AgentRun's `status.corrections` shows it."""
    body = correction.correction
    out: dict[str, Any] = {"tool": correction.tool, "audience": list(correction.audience),
                           "state": str(correction.state)}
    if isinstance(body, dict) and body.get("template"):
        out["template"] = str(body["template"])
    if correction.approver and correction.decided_at:
        out["decidedBy"] = correction.approver
        out["decidedAt"] = correction.decided_at.strftime("%Y-%m-%dT%H:%M:%SZ")
    return out


def describe_unsettled(steps: list[Step]) -> str:
    return ", ".join(f"step {s.step_idx} {s.tool} ({s.status}"
                     f"{', compensation intended' if s.comp_status == 'INTENDED' else ''})"
                     for s in steps)


def fingerprint(found: RunFacts) -> LogFingerprint | None:
    """The same value `SagaLog.log_fingerprints` reads in SQL, from what a resync pass read:
    the baseline a run's later checks are compared with (None: the run is not in the log)."""
    run = found.run
    if run is None:
        return None
    pivot = run.pivot
    steps = ",".join(f"{s.status}:{s.comp_status or ''}"
                     for s in sorted(found.steps, key=lambda s: s.step_idx))
    pending = ",".join(f"{idx}:{shown['state']}"
                       for idx, shown in sorted(found.corrections.items(),
                                                key=lambda kv: int(kv[0])))
    return (str(run.state), run.owner_epoch, run.irreversible_before_pivot,
            "" if pivot is None else str(pivot.state), "" if pivot is None else pivot.plan_hash,
            steps, pending, ",".join(str(i) for i in sorted(found.awaiting_human)))


def facts_since(saga_log: OperatorStore, run_id: str, before: RunFacts | None,
                namespace: str = "") -> RunFacts:
    """What the log says about the run now, as `facts` reads it: `before` (read the same way)
    again when the run's fingerprint has not moved since (one statement instead of four)."""
    if (before is not None and before.run is not None and before.run.run_id == run_id
            and not before.other_namespace):
        now = saga_log.log_fingerprints([run_id]).get(run_id)
        if now is not None and now == fingerprint(before):
            return before
    return facts(saga_log, run_id, namespace)


def _elsewhere(saga_log: OperatorStore, run_id: str, namespace: str) -> bool:
    """Whether the run id an AgentRun of `namespace` names is a run of another namespace only:
    named with another namespace (`payments/refund-1`), or bare while this namespace has no
    such run and another has."""
    if log_run_id(namespace, run_id) != run_id:
        return True
    _, bare = split_log_run_id(run_id)
    if "/" in bare:
        return True
    return any(found != namespace for found in saga_log.namespaces_with_run(bare))
