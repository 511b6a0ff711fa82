"""Corrections (`corrections`, R9): recorded by the run's owner (R12), decided by a human once,
claimed before sending (Approved -> Sending, durable) and marked Sent."""

from __future__ import annotations

from dataclasses import replace

from agentsaga.errors import CorrectionError
from agentsaga.states import CORRECTIONS_PENDING, CorrectionState
from agentsaga.store.base import StoreBase, to_json
from agentsaga.store.fencing import check_epoch
from agentsaga.store.records import CORRECTION_COLUMNS, Correction, correction_from_row

_PENDING_SQL = ", ".join(f"'{s}'" for s in sorted(CORRECTIONS_PENDING))


class CorrectionStatements(StoreBase):
    def record_correction(self, epoch: int, correction: Correction) -> bool:
        """Store the correction once (R12: only the run's current owner writes). False when
        the step already had one."""
        with self.db.transaction() as conn:
            check_epoch(conn, correction.run_id, epoch, allow_ended=True)
            inserted = conn.execute(
                "INSERT INTO corrections (run_id, step_idx, tool, audience, rank, correction,"
                " state) VALUES (%s, %s, %s, %s, %s, %s, %s)"
                " ON CONFLICT (run_id, step_idx) DO NOTHING RETURNING step_idx",
                (correction.run_id, correction.step_idx, correction.tool, correction.audience,
                 correction.rank, to_json(correction.correction), str(correction.state)),
            ).fetchone()
        if inserted is None:
            return False
        self.hooks.on_correction(correction)
        return True

    def corrections(self, run_id: str, *, pending_only: bool = False) -> list[Correction]:
        """A run's corrections in the order a human should see them: internal first (only
        those still waiting for a human or a sender with `pending_only`)."""
        pending = f" AND state IN ({_PENDING_SQL})" if pending_only else ""
        with self.db.connection() as conn:
            rows = conn.execute(
                f"SELECT {CORRECTION_COLUMNS} FROM corrections WHERE run_id = %s{pending}"
                " ORDER BY rank, step_idx DESC", (run_id,)).fetchall()
        return [correction_from_row(r) for r in rows]

    def decide_correction(self, run_id: str, step_idx: int, state: CorrectionState,
                          approver: str, reason: str) -> Correction:
        """A human's decision on a Proposed correction, once."""
        with self.db.transaction() as conn:
            row = conn.execute(
                "UPDATE corrections SET state = %s, approver = %s, reason = %s,"
                " decided_at = now() WHERE run_id = %s AND step_idx = %s AND state = 'Proposed'"
                f" RETURNING {CORRECTION_COLUMNS}",
                (str(state), approver, reason, run_id, step_idx)).fetchone()
            current = None if row is not None else conn.execute(
                "SELECT state FROM corrections WHERE run_id = %s AND step_idx = %s",
                (run_id, step_idx)).fetchone()
        if row is None:
            if current is None:
                raise CorrectionError(f"run {run_id!r} has no correction for step {step_idx}")
            raise CorrectionError(f"the correction for step {step_idx} of run {run_id!r} is "
                                  f"{current[0]}, not Proposed; nothing was changed")
        decided = correction_from_row(row)
        self.hooks.on_correction(decided)
        return decided

    def claim_correction(self, run_id: str, step_idx: int) -> bool:
        """Approved -> Sending, durably, before the call; False if someone else claimed it."""
        with self.db.transaction(durable=True) as conn:
            row = conn.execute("UPDATE corrections SET state = 'Sending' WHERE run_id = %s"
                               " AND step_idx = %s AND state = 'Approved' RETURNING step_idx",
                               (run_id, step_idx)).fetchone()
        return row is not None

    def mark_correction_sent(self, correction: Correction) -> None:
        with self.db.connection() as conn:
            conn.execute("UPDATE corrections SET state = 'Sent' WHERE run_id = %s"
                         " AND step_idx = %s AND state = 'Sending'",
                         (correction.run_id, correction.step_idx))
        self.hooks.on_correction(replace(correction, state=CorrectionState.SENT))
