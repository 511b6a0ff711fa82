"""How a run was resolved: what a reconcile or an unwind of it did (R7, R8, R9): found by key,
compensated, queued as corrections, failed, pending, still unknown. `settled` (every row's
outcome known and acted on) is False while anything is left for a human or a retry. (Rendered
for people by `agentsaga.cli.job_commands`; its JSON is what the Jobs print and the sidecar's
Reconcile and Unwind RPCs answer, `report_json`.)"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from agentsaga.redact import redact_value
from agentsaga.saga.reconcile import Reconciled
from agentsaga.states import StepStatus

Action = Literal["reconcile", "unwind"]


@dataclass
class ResolutionReport:
    """The resolution of one run by one reconcile or unwind."""

    run_id: str
    action: Action
    epoch: int = 0
    reconciled: list[dict[str, Any]] = field(default_factory=list)
    compensated: list[dict[str, Any]] = field(default_factory=list)
    queued: list[dict[str, Any]] = field(default_factory=list)
    failed: list[dict[str, Any]] = field(default_factory=list)
    pending: list[dict[str, Any]] = field(default_factory=list)
    unsettled: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)
    corrections: list[dict[str, Any]] = field(default_factory=list)
    waiting: list[dict[str, Any]] = field(default_factory=list)
    """What waits for a person, each with the command that settles or decides it: steps no
    lookup can settle, corrections not yet decided or sent."""
    state: str = ""

    @property
    def settled(self) -> bool:
        return not (self.failed or self.pending or self.unsettled)

    @property
    def needs_human(self) -> bool:
        """A person must act before the run is done (the command exits non-zero)."""
        return bool(self.waiting)

    def add_reconciled(self, results: Iterable[Reconciled]) -> None:
        """R7's findings: what was found or not (reconciled), what stays unknown (unsettled)."""
        for out in results:
            step = out.step
            entry = {"step_idx": step.step_idx, "tool": step.tool,
                     "was": str(out.was or step.status)}
            if step.status == StepStatus.CONFIRMED and out.finding != "already_settled":
                self.reconciled.append({**entry, "now": "CONFIRMED", "ref": step.external_ref})
            elif step.status == StepStatus.NOT_EXECUTED and out.finding != "already_settled":
                self.reconciled.append({**entry, "now": "NOT_EXECUTED"})
            elif step.status == StepStatus.UNKNOWN:
                more: dict[str, Any] = {}
                if out.retry_after_s is not None:
                    more = {"retry_after_s": round(out.retry_after_s, 3),
                            "certain_at": out.certain_at.isoformat() if out.certain_at else ""}
                self.unsettled.append({**entry, "now": "UNKNOWN", "why": out.detail, **more})

    @property
    def wait_s(self) -> float | None:
        """Seconds until waiting alone settles what is left (R7: every unsettled row only waits
        for its certainty); None when something needs a human or another run of the job."""
        if self.settled or self.failed or self.pending:
            return None
        waits = [u.get("retry_after_s") for u in self.unsettled]
        if any(w is None for w in waits):
            return None
        return max(float(w) for w in waits if w is not None)

    def to_json(self) -> dict[str, Any]:
        """The report as every front end and Job prints it, masked (`agentsaga.redact`): a
        failed compensation's `why` quotes what the real system said."""
        report: dict[str, Any] = redact_value({
            "run_id": self.run_id, "action": self.action, "epoch": self.epoch,
            "settled": self.settled, "state": self.state, "reconciled": self.reconciled,
            "compensated": self.compensated, "queued": self.queued, "failed": self.failed,
            "pending": self.pending, "unsettled": self.unsettled, "skipped": self.skipped,
            "corrections": self.corrections, "wait_s": self.wait_s, "waiting": self.waiting,
            "needs_human": self.needs_human})
        return report
