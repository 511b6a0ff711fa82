"""Steps only a human can settle (`step_settlements`): the hand-over (Waiting), and the
person's word on whether the effect happened (Settled), written with the step's new status in
one transaction. A human decision, like a pivot approval, is not a writer of the run: it takes
no epoch and fences nobody (R12); it moves only an UNKNOWN row, which no writer is calling."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from agentsaga.errors import SettlementError
from agentsaga.redact import redact_optional
from agentsaga.states import SETTLED_STATUS, SettlementOutcome, SettlementState, StepStatus
from agentsaga.store.base import StoreBase
from agentsaga.store.fencing import check_epoch
from agentsaga.store.records import STEP_COLUMNS, Step, by_name, column_names, step_from_row

SETTLEMENT_COLUMNS = ("run_id, step_idx, step_key, state, why, outcome, external_ref, settler,"
                      " reason, asked_at, settled_at")
SETTLEMENT_NAMES = column_names(SETTLEMENT_COLUMNS)


@dataclass(frozen=True, kw_only=True)
class Settlement:
    """A step handed to a human, and (once Settled) what the human said."""

    run_id: str
    step_idx: int
    step_key: str
    state: SettlementState
    why: str = ""
    outcome: SettlementOutcome | None = None
    external_ref: str | None = None
    settler: str | None = None
    reason: str | None = None
    asked_at: datetime | None = None
    settled_at: datetime | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"step_idx": self.step_idx, "step_key": self.step_key,
                               "state": str(self.state), "why": self.why}
        if self.outcome is not None:
            out.update(outcome=str(self.outcome), ref=self.external_ref, settler=self.settler,
                       reason=self.reason, settled_at=self.settled_at)
        return out


def _settlement(row: tuple[Any, ...]) -> Settlement:
    """A `step_settlements` row selected as SETTLEMENT_COLUMNS."""
    r = by_name(SETTLEMENT_NAMES, row)
    outcome = r["outcome"]
    return Settlement(run_id=r["run_id"], step_idx=r["step_idx"], step_key=r["step_key"],
                      state=SettlementState(r["state"]), why=r["why"],
                      outcome=None if outcome is None else SettlementOutcome(outcome),
                      external_ref=r["external_ref"], settler=r["settler"],
                      reason=r["reason"], asked_at=r["asked_at"], settled_at=r["settled_at"])


@dataclass(frozen=True)
class Settled:
    """What `settle_step` did: the settlement, the step as it now is, and whether this call
    recorded it (False: the same settlement was recorded before, nothing changed)."""

    settlement: Settlement
    step: Step
    recorded: bool


class SettlementStatements(StoreBase):
    def ask_human(self, run_id: str, epoch: int, step_idx: int, step_key: str,
                  why: str) -> None:
        """Hand an UNKNOWN step that no lookup can settle to a human (R12: by the run's current
        owner); asking again changes nothing."""
        with self.db.transaction() as conn:
            check_epoch(conn, run_id, epoch, allow_ended=True)
            conn.execute(
                "INSERT INTO step_settlements (run_id, step_idx, step_key, why)"
                " SELECT %s, %s, %s, %s WHERE EXISTS (SELECT 1 FROM saga_log"
                " WHERE run_id = %s AND step_idx = %s AND status = 'UNKNOWN')"
                " ON CONFLICT (run_id, step_idx) DO NOTHING",
                (run_id, step_idx, step_key, redact_optional(why) or "", run_id, step_idx))

    def settlements(self, run_id: str, *, waiting_only: bool = False) -> list[Settlement]:
        """A run's steps handed to a human, by step (only those still Waiting for a person
        whose step is still UNKNOWN, with `waiting_only`)."""
        waiting = (" AND s.state = 'Waiting' AND EXISTS (SELECT 1 FROM saga_log l WHERE"
                   " l.run_id = s.run_id AND l.step_idx = s.step_idx AND l.status = 'UNKNOWN')"
                   if waiting_only else "")
        columns = ", ".join(f"s.{c.strip()}" for c in SETTLEMENT_COLUMNS.split(","))
        with self.db.connection() as conn:
            rows = conn.execute(
                f"SELECT {columns} FROM step_settlements s WHERE s.run_id = %s{waiting}"
                " ORDER BY s.step_idx", (run_id,)).fetchall()
        return [_settlement(r) for r in rows]

    def settle_step(self, run_id: str, step_idx: int, outcome: SettlementOutcome, *,
                    settler: str, reason: str, external_ref: str | None = None,
                    step_key: str | None = None) -> Settled:
        """A person's word on an UNKNOWN step: Happened -> CONFIRMED (with the effect's id),
        NotHappened -> NOT_EXECUTED. Recorded once; the same settlement again is no change;
        anything else raises SettlementError and changes nothing."""
        status = SETTLED_STATUS[outcome]
        with self.db.transaction(durable=True) as conn:
            row = conn.execute(
                f"SELECT {STEP_COLUMNS} FROM saga_log WHERE run_id = %s AND step_idx = %s"
                " FOR UPDATE", (run_id, step_idx)).fetchone()
            if row is None:
                raise SettlementError(f"run {run_id!r} has no step {step_idx}; see "
                                      f"`agentsaga log --run {run_id}`")
            step = step_from_row(row)
            if step_key is not None and step_key != step.idempotency_key:
                raise SettlementError(
                    f"step {step_idx} of run {run_id!r} has the key {step.idempotency_key!r}, "
                    f"not {step_key!r}: check that you are settling the step you looked at")
            before = conn.execute(
                f"SELECT {SETTLEMENT_COLUMNS} FROM step_settlements WHERE run_id = %s"
                " AND step_idx = %s", (run_id, step_idx)).fetchone()
            earlier = None if before is None else _settlement(before)
            if earlier is not None and earlier.state == SettlementState.SETTLED:
                same = (earlier.outcome == outcome
                        and (external_ref is None or earlier.external_ref == external_ref))
                if same:
                    return Settled(earlier, step, recorded=False)
                raise SettlementError(
                    f"step {step_idx} of run {run_id!r} was settled before as {earlier.outcome}"
                    f" by {earlier.settler}; a settlement is recorded once")
            if step.status != StepStatus.UNKNOWN:
                raise SettlementError(_not_unknown(run_id, step))
            updated = conn.execute(
                "UPDATE saga_log SET status = %s, external_ref = COALESCE(%s, external_ref),"
                " error = %s, updated_at = now() WHERE run_id = %s AND step_idx = %s"
                f" AND status = 'UNKNOWN' RETURNING {STEP_COLUMNS}",
                (str(status), external_ref,
                 redact_optional(f"settled by {settler} as {outcome}: {reason}"), run_id,
                 step_idx)).fetchone()
            assert updated is not None  # the row is locked and UNKNOWN
            written = conn.execute(
                "INSERT INTO step_settlements (run_id, step_idx, step_key, state, outcome,"
                " external_ref, settler, reason, settled_at)"
                " VALUES (%s, %s, %s, 'Settled', %s, %s, %s, %s, now())"
                " ON CONFLICT (run_id, step_idx) DO UPDATE SET state = 'Settled',"
                " outcome = EXCLUDED.outcome, external_ref = EXCLUDED.external_ref,"
                " settler = EXCLUDED.settler, reason = EXCLUDED.reason, settled_at = now()"
                f" RETURNING {SETTLEMENT_COLUMNS}",
                (run_id, step_idx, step.idempotency_key, str(outcome), external_ref, settler,
                 redact_optional(reason))).fetchone()
            assert written is not None
        self.forget(run_id)
        now = step_from_row(updated)
        self.hooks.on_outcome(now)
        return Settled(_settlement(written), now, recorded=True)


def _not_unknown(run_id: str, step: Step) -> str:
    if step.status == StepStatus.INTENDED:
        return (f"step {step.step_idx} of run {run_id!r} is INTENDED: its call may still be on "
                f"the wire. Run `agentsaga reconcile --run {run_id}` first; a step that no "
                "lookup can settle is then UNKNOWN and waits for you")
    return (f"step {step.step_idx} of run {run_id!r} is {step.status}, not UNKNOWN: it is "
            "settled already; nothing was recorded")
