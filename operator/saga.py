"""What the operator reads from the saga log (R11: the log, not the pod, is the truth).

Read-only: the operator never writes a step and never holds a run's epoch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agentsaga.log import Run, SagaLog, Step

_COUNT_FIELDS = {
    "INTENDED": "intended", "CONFIRMED": "confirmed", "FAILED": "failed", "UNKNOWN": "unknown",
    "NOT_EXECUTED": "notExecuted", "COMPENSATED": "compensated",
}


@dataclass(frozen=True)
class RunFacts:
    run: Run | None
    steps: list[Step] = field(default_factory=list)
    corrections: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def counts(self) -> dict[str, int]:
        out = {"total": len(self.steps), **{name: 0 for name in _COUNT_FIELDS.values()}}
        for step in self.steps:
            out[_COUNT_FIELDS[step.status]] += 1
        return out

    @property
    def unsettled(self) -> list[Step]:
        """Rows whose effect in the world is not known yet: INTENDED or UNKNOWN, or a
        compensation that was intended but has no recorded outcome."""
        return [s for s in self.steps
                if s.status in ("INTENDED", "UNKNOWN") or s.comp_status == "INTENDED"]

    @property
    def finished(self) -> bool:
        return self.run is not None and not self.run.open


def facts(saga_log: SagaLog, run_id: str) -> RunFacts:
    run = saga_log.run(run_id)
    if run is None:
        return RunFacts(None)
    steps = saga_log.steps(run_id)
    with saga_log.pool.connection() as conn:
        rows = conn.execute(
            "SELECT step_idx, tool, audience, correction, state, approver, decided_at"
            " FROM corrections"
            " WHERE run_id = %s AND state IN ('Proposed', 'Approved', 'Sending')"
            " ORDER BY rank, step_idx",
            (run_id,),
        ).fetchall()
    corrections = {
        str(r["step_idx"]): {
            "tool": r["tool"], "audience": list(r["audience"]), "state": r["state"],
            **({"template": str(r["correction"].get("template", ""))}
               if isinstance(r["correction"], dict) and r["correction"].get("template") else {}),
            **({"decidedBy": r["approver"],
                "decidedAt": r["decided_at"].strftime("%Y-%m-%dT%H:%M:%SZ")}
               if r["approver"] and r["decided_at"] else {}),
        }
        for r in rows
    }
    return RunFacts(run, steps, corrections)


def describe_unsettled(steps: list[Step]) -> str:
    return ", ".join(f"step {s.step_idx} {s.tool} ({s.status}"
                     f"{', compensation intended' if s.comp_status == 'INTENDED' else ''})"
                     for s in steps)
