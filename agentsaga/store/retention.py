"""Retention: ended runs removed from the log once they are older than a cutoff
(`agentsaga prune`).

A run is removed only when nothing can need it again: it ended (succeeded, failed or unwound,
with `ended_at` set) before the cutoff, none of its rows is unsettled (R7: INTENDED or UNKNOWN,
or a compensation intended), and none of its corrections waits for a human or a sender (R9).
Each batch is one statement: a run goes with its rows and corrections, or not at all, so a crash
at any point leaves whole runs. The runs are locked (`FOR UPDATE SKIP LOCKED`): a run that a
reconcile or an unwind is changing is skipped, and its state is checked again under the lock.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from agentsaga.states import CORRECTIONS_PENDING, ENDED_PHASE, UNSETTLED, CompensationStatus
from agentsaga.store.base import StoreBase

_ENDED = ", ".join(f"'{s}'" for s in sorted(ENDED_PHASE))
_UNSETTLED = ", ".join(f"'{s}'" for s in sorted(UNSETTLED))
_PENDING = ", ".join(f"'{s}'" for s in sorted(CORRECTIONS_PENDING))

_PRUNABLE = (
    "SELECT r.run_id FROM saga_runs r"
    f" WHERE r.state IN ({_ENDED}) AND r.ended_at IS NOT NULL AND r.ended_at < %(cutoff)s"
    " AND NOT EXISTS (SELECT 1 FROM saga_log s WHERE s.run_id = r.run_id"
    f"   AND (s.status IN ({_UNSETTLED}) OR s.comp_status = '{CompensationStatus.INTENDED}'))"
    " AND NOT EXISTS (SELECT 1 FROM corrections c WHERE c.run_id = r.run_id"
    f"   AND c.state IN ({_PENDING}))"
    " ORDER BY r.ended_at LIMIT %(batch)s"
)

_PRUNE = (
    f"WITH doomed AS ({_PRUNABLE} FOR UPDATE OF r SKIP LOCKED),"
    " gone_settlements AS (DELETE FROM step_settlements"
    "   WHERE run_id IN (SELECT run_id FROM doomed)),"
    " gone_attempts AS (DELETE FROM saga_attempts WHERE run_id IN (SELECT run_id FROM doomed)),"
    " gone_observations AS (DELETE FROM saga_observations"
    "   WHERE run_id IN (SELECT run_id FROM doomed)),"
    " gone_corrections AS (DELETE FROM corrections WHERE run_id IN (SELECT run_id FROM doomed)"
    "   RETURNING 1),"
    " gone_steps AS (DELETE FROM saga_log WHERE run_id IN (SELECT run_id FROM doomed)"
    "   RETURNING 1),"
    " gone_runs AS (DELETE FROM saga_runs WHERE run_id IN (SELECT run_id FROM doomed)"
    "   RETURNING 1)"
    " SELECT (SELECT count(*) FROM gone_runs), (SELECT count(*) FROM gone_steps),"
    " (SELECT count(*) FROM gone_corrections)"
)

_COUNT = (
    f"SELECT count(*), coalesce(sum((SELECT count(*) FROM saga_log s"
    f" WHERE s.run_id = p.run_id)), 0) FROM ({_PRUNABLE}) p"
)


@dataclass(frozen=True)
class Pruned:
    runs: int = 0
    steps: int = 0
    corrections: int = 0

    def __add__(self, other: Pruned) -> Pruned:
        return Pruned(self.runs + other.runs, self.steps + other.steps,
                      self.corrections + other.corrections)


class RetentionStatements(StoreBase):
    def prune_batch(self, cutoff: datetime.datetime, batch: int) -> Pruned:
        """Remove up to `batch` prunable runs that ended before `cutoff` (one transaction)."""
        with self.db.transaction() as conn:
            row = conn.execute(_PRUNE, {"cutoff": cutoff, "batch": batch}).fetchone()
        assert row is not None
        return Pruned(int(row[0]), int(row[1]), int(row[2]))

    def prunable(self, cutoff: datetime.datetime, limit: int) -> Pruned:
        """What `prune_batch` would remove (at most `limit` runs), removing nothing."""
        with self.db.connection() as conn:
            row = conn.execute(_COUNT, {"cutoff": cutoff, "batch": limit}).fetchone()
        assert row is not None
        return Pruned(int(row[0]), int(row[1]))
