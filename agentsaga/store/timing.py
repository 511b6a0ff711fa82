"""Time and what was seen (R7): each step's deadline and "certain at" by Postgres's clock, the
attempts of a re-sent step, and the append-only observations of calls that came back too late
to write their outcome.

    certainty ........ the database's now, the step's deadline, when its absence is certain
                       (deadline + visible_within_s) and until when the system dedupes its key
    lookup_hints ..... what a lookup may use beyond the key: each step's deadline and the
                       effect's id when the row or an observation already holds it
    attempts ......... a re-sent step's later attempts (the row keeps what was first sent)
    observations ..... what a fenced or overtaken call saw; no fence blocks them
    reopen ........... a step settled NOT_EXECUTED whose effect was observed later: CONFIRMED
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from agentsaga.redact import redact_optional
from agentsaga.states import StepStatus
from agentsaga.store.base import StoreBase, to_contract_json, to_json
from agentsaga.store.fencing import check_epoch
from agentsaga.store.records import STEP_COLUMNS, Step, by_name, column_names, step_from_row


@dataclass(frozen=True)
class Certainty:
    """One step's times, all by the database's clock."""

    now: datetime
    deadline: datetime | None
    """None: a row written before time contracts (its absence is certain after the re-check)."""
    certain_at: datetime | None
    """deadline + visible_within_s: an effect of the call would be visible by then."""
    dedupes_until: datetime
    """created_at + dedupes_for_s: until then the system answers a re-sent key with the first."""

    @property
    def absence_certain(self) -> bool:
        return self.certain_at is None or self.now >= self.certain_at

    @property
    def resend_deduplicated(self) -> bool:
        return self.now < self.dedupes_until

    @property
    def wait_s(self) -> float:
        """Seconds until absence is certain (0 when it is)."""
        if self.certain_at is None:
            return 0.0
        return max(0.0, (self.certain_at - self.now).total_seconds())


@dataclass(frozen=True)
class LookupHint:
    deadline: datetime | None
    """The newest attempt's deadline (None: a row written before time contracts)."""
    external_ref: str | None
    """The effect's id, when the row or an observation holds it."""


@dataclass(frozen=True, kw_only=True)
class Attempt:
    run_id: str
    step_idx: int
    attempt: int
    args: dict[str, Any]
    deadline: datetime
    writer_epoch: int
    created_at: datetime


@dataclass(frozen=True, kw_only=True)
class Observation:
    run_id: str
    step_idx: int
    key: str
    outcome: StepStatus
    external_ref: str | None
    result: Any
    error: str | None
    writer_epoch: int
    observed_at: datetime


_OBSERVATION_COLUMNS = ("run_id, step_idx, idempotency_key, outcome, external_ref, result, error,"
                        " writer_epoch, observed_at")
_OBSERVATION_NAMES = column_names(_OBSERVATION_COLUMNS)
_ATTEMPT_COLUMNS = "run_id, step_idx, attempt, args, deadline, writer_epoch, created_at"
_ATTEMPT_NAMES = column_names(_ATTEMPT_COLUMNS)


def _observation(row: Sequence[Any]) -> Observation:
    """A `saga_observations` row selected as _OBSERVATION_COLUMNS."""
    r = by_name(_OBSERVATION_NAMES, row)
    return Observation(run_id=r["run_id"], step_idx=r["step_idx"], key=r["idempotency_key"],
                       outcome=StepStatus(r["outcome"]), external_ref=r["external_ref"],
                       result=r["result"], error=r["error"], writer_epoch=r["writer_epoch"],
                       observed_at=r["observed_at"])


class TimingStatements(StoreBase):
    def certainty(self, run_id: str, step_idx: int) -> Certainty | None:
        with self.db.connection() as conn:
            row = conn.execute(
                "SELECT now(), deadline, deadline + make_interval(secs => visible_within_s),"
                " created_at + make_interval(secs => dedupes_for_s)"
                " FROM saga_log WHERE run_id = %s AND step_idx = %s", (run_id, step_idx),
            ).fetchone()
        if row is None:
            return None
        now, deadline, certain_at, dedupes_until = row
        return Certainty(now=now, deadline=deadline, certain_at=certain_at,
                         dedupes_until=dedupes_until)

    def lookup_hints(self, keys: Sequence[str]) -> dict[str, LookupHint]:
        """Each key's deadline and known external id (the row's, else the newest one a late
        call observed), in one statement for a whole batch of lookups."""
        if not keys:
            return {}
        with self.db.connection() as conn:
            rows = conn.execute(
                "SELECT l.idempotency_key, l.deadline, COALESCE(l.external_ref,"
                " (SELECT o.external_ref FROM saga_observations o"
                "  WHERE o.idempotency_key = l.idempotency_key AND o.external_ref IS NOT NULL"
                "  ORDER BY o.id DESC LIMIT 1))"
                " FROM saga_log l WHERE l.idempotency_key = ANY(%s)", (list(keys),),
            ).fetchall()
        return {r[0]: LookupHint(r[1], r[2]) for r in rows}

    def db_now(self) -> datetime:
        with self.db.connection() as conn:
            row = conn.execute("SELECT now()").fetchone()
        assert row is not None
        now: datetime = row[0]
        return now

    def re_intend(self, run_id: str, epoch: int, step_idx: int, *, args: dict[str, Any],
                  compensation: dict[str, Any] | None, audience: Sequence[str],
                  call_timeout_s: float, contract: dict[str, Any] | None = None,
                  contract_hash: str | None = None) -> Step | None:
        """R2 again for a NOT_EXECUTED step that runs once more under the same key. The row
        keeps the arguments first sent; this attempt's arguments go beside it, in
        `saga_attempts`, with its own deadline. The compensation and audience are this
        attempt's: the effect that can now exist is the one it sends (R6, R9).

        Returns None if the row is no longer NOT_EXECUTED (another writer moved it)."""
        self.forget(run_id)
        with self.db.transaction(durable=True) as conn:
            check_epoch(conn, run_id, epoch)
            row = conn.execute(
                "UPDATE saga_log SET status = 'INTENDED', error = NULL, writer_epoch = %s,"
                " compensation = %s, audience = %s, attempt = attempt + 1,"
                " contract_hash = %s, contract = %s,"
                " deadline = now() + make_interval(secs => %s), updated_at = now()"
                " WHERE run_id = %s AND step_idx = %s AND status = 'NOT_EXECUTED'"
                f" RETURNING attempt, {STEP_COLUMNS}",
                (epoch, to_json(compensation), list(audience), contract_hash,
                 to_contract_json(contract, contract_hash), call_timeout_s, run_id, step_idx),
            ).fetchone()
            if row is None:
                return None
            conn.execute(
                "INSERT INTO saga_attempts (run_id, step_idx, attempt, args, deadline,"
                " writer_epoch) VALUES (%s, %s, %s, %s, now() + make_interval(secs => %s), %s)",
                (run_id, step_idx, row[0], to_json(args), call_timeout_s, epoch))
        return step_from_row(row[1:])

    def attempts(self, run_id: str) -> list[Attempt]:
        with self.db.connection() as conn:
            rows = conn.execute(
                f"SELECT {_ATTEMPT_COLUMNS}"
                " FROM saga_attempts WHERE run_id = %s ORDER BY step_idx, attempt", (run_id,),
            ).fetchall()
        return [Attempt(**by_name(_ATTEMPT_NAMES, r)) for r in rows]

    def record_observation(self, step: Step, epoch: int, outcome: StepStatus, *,
                           external_ref: str | None, result: Any, error: str | None) -> None:
        """What a call saw after it lost the right to write its outcome. Append-only, unfenced,
        durable: the real system's word is never thrown away."""
        with self.db.transaction(durable=True) as conn:
            conn.execute(
                f"INSERT INTO saga_observations ({_OBSERVATION_COLUMNS})"
                " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, now())",
                (step.run_id, step.step_idx, step.idempotency_key, str(outcome), external_ref,
                 to_json(result), redact_optional(error), epoch))

    def observations(self, run_id: str) -> list[Observation]:
        with self.db.connection() as conn:
            rows = conn.execute(
                f"SELECT {_OBSERVATION_COLUMNS} FROM saga_observations WHERE run_id = %s"
                " ORDER BY id", (run_id,),
            ).fetchall()
        return [_observation(r) for r in rows]

    def observed_effects(self, keys: list[str]) -> dict[str, Observation]:
        """The first CONFIRMED observation of each key that has one."""
        if not keys:
            return {}
        with self.db.connection() as conn:
            rows = conn.execute(
                f"SELECT DISTINCT ON (idempotency_key) {_OBSERVATION_COLUMNS}"
                " FROM saga_observations WHERE idempotency_key = ANY(%s)"
                " AND outcome = 'CONFIRMED' ORDER BY idempotency_key, id", (keys,),
            ).fetchall()
        return {observation.key: observation for observation in map(_observation, rows)}

    def late_effects(self, run_ids: Sequence[str] | None = None) -> list[str]:
        """Ended runs holding a step settled NOT_EXECUTED whose effect a call observed after
        all (of `run_ids`, or of the whole log): each owes a reconcile or unwind that re-opens
        the step (R7), which nothing runs once the run has ended (the operator starts it)."""
        where = "" if run_ids is None else " AND o.run_id = ANY(%s)"
        with self.db.connection() as conn:
            rows = conn.execute(
                "SELECT DISTINCT o.run_id FROM saga_observations o"
                " JOIN saga_log l ON l.run_id = o.run_id AND l.step_idx = o.step_idx"
                " AND l.idempotency_key = o.idempotency_key"
                " JOIN saga_runs r ON r.run_id = o.run_id"
                " WHERE o.outcome = 'CONFIRMED' AND l.status = 'NOT_EXECUTED'"
                f" AND r.ended_at IS NOT NULL{where} ORDER BY o.run_id",
                () if run_ids is None else (list(run_ids),)).fetchall()
        return [str(r[0]) for r in rows]

    def reopen(self, run_id: str, epoch: int, step_idx: int, *, external_ref: str | None,
               result: Any) -> Step | None:
        """A step settled NOT_EXECUTED whose effect was observed after all: CONFIRMED with what
        was seen, so that the unwind compensates it. None if it is no longer NOT_EXECUTED."""
        self.forget(run_id)
        with self.db.transaction(durable=True) as conn:
            check_epoch(conn, run_id, epoch, allow_ended=True)
            row = conn.execute(
                "UPDATE saga_log SET status = 'CONFIRMED', external_ref = %s, result = %s,"
                " error = 'reopened: its effect was observed after it was settled NOT_EXECUTED',"
                " updated_at = now()"
                " WHERE run_id = %s AND step_idx = %s AND status = 'NOT_EXECUTED'"
                f" RETURNING {STEP_COLUMNS}",
                (external_ref, to_json(result), run_id, step_idx),
            ).fetchone()
        if row is None:
            return None
        step = step_from_row(row)
        self.hooks.on_outcome(step)
        return step
