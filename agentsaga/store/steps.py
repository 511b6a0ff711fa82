"""Steps (`saga_log`): the INTENDED row before every call (R2), its outcome, its compensation
(R8), and the reads that resume, reconcile and unwind work from (R11)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import psycopg
from psycopg.rows import tuple_row

from agentsaga.errors import LogRefused, LogUnavailable
from agentsaga.redact import redact_optional
from agentsaga.states import NOT_LIVE, UNSETTLED, CompensationStatus, RunState, StepStatus
from agentsaga.store.base import (
    StoreBase,
    text_array,
    to_contract_json,
    to_json,
    to_stored_json,
)
from agentsaga.store.connections import translate
from agentsaga.store.fencing import (
    check_answer,
    check_epoch,
    fenced_batch_sql,
    fenced_sql,
    status_in,
)
from agentsaga.store.group_commit import Pending
from agentsaga.store.records import STEP_COLUMNS, Step, by_name, column_names, step_from_row
from agentsaga.time_contract import DEFAULT as DEFAULT_TIMING
from agentsaga.time_contract import TimeContract

_OUTCOME_COLUMNS = "status, external_ref, result, error, updated_at"
_OUTCOME_NAMES = column_names(_OUTCOME_COLUMNS)
_UNSETTLED_SQL = status_in(tuple(sorted(UNSETTLED)))
_NOT_LIVE_SQL = ", ".join(f"'{s}'" for s in sorted(NOT_LIVE))

def _outcome_sql(expect_sql: str, returning: str) -> str:
    """The single-row outcome write (`{fence}` for `fenced_sql`)."""
    return ("UPDATE saga_log SET status = %(status)s, result = COALESCE(%(result)s, result),"
            " external_ref = COALESCE(%(ref)s, external_ref), error = %(error)s,"
            " updated_at = now() WHERE run_id = %(run_id)s AND step_idx = %(step_idx)s"
            f" AND {expect_sql} AND {{fence}} RETURNING {returning}")


# The two outcome statements are built at each use (a few microseconds, against a commit's
# hundreds), not once per process: `make mutate` forks its test sessions from a process that
# ran the tests already, and must see the functions that build them with a mutant switched on.
def _lone_outcome_sql() -> str:
    return _outcome_sql(_UNSETTLED_SQL, _OUTCOME_COLUMNS)


def _batch_sql() -> str:
    """One batch of the group commit: each row's values as arrays, written under its own
    epoch (`fenced_batch_sql`)."""
    return fenced_batch_sql(
        "SELECT * FROM unnest(%(i)s::int[], %(run_id)s::text[], %(step_idx)s::int[],"
        " %(epoch)s::bigint[], %(status)s::text[], %(result)s::jsonb[], %(ref)s::text[],"
        " %(error)s::text[], %(ended_ok)s::bool[])"
        " AS v(i, run_id, step_idx, epoch, status, result, ref, error, ended_ok)",
        "UPDATE saga_log s SET status = v.status, result = COALESCE(v.result, s.result),"
        " external_ref = COALESCE(v.ref, s.external_ref), error = v.error, updated_at = now()"
        " FROM v, run WHERE s.run_id = v.run_id AND s.step_idx = v.step_idx"
        f" AND s.{_UNSETTLED_SQL} AND {{fence}}"
        " RETURNING v.i AS i, s.status AS status, s.external_ref AS external_ref,"
        " s.result AS result, s.error AS error, s.updated_at AS updated_at",
        ("status", "external_ref", "result", "error", "updated_at"))


def _row_at_fault(exc: LogUnavailable) -> bool:
    """Whether a failed batch may have failed for one of its rows, or for the rows together
    (a deadlock), rather than for the server: its rows are then written one by one."""
    return isinstance(exc, LogRefused) or isinstance(exc.__cause__,
                                                     psycopg.errors.TransactionRollback)


def _cause(exc: LogUnavailable) -> BaseException:
    """The psycopg error behind `exc`: each dispatch of a batch raises its own translation of
    it (`_grouped_outcome`)."""
    return exc.__cause__ if isinstance(exc.__cause__, psycopg.Error) else exc


def _with_outcome(step: Step, row: tuple[Any, ...]) -> Step:
    """`step` with the columns an outcome write changes (_OUTCOME_COLUMNS); the rest,
    its contract included, as they were."""
    r = by_name(_OUTCOME_NAMES, row)
    return replace(step, status=StepStatus(r["status"]), external_ref=r["external_ref"],
                   result=r["result"], error=r["error"], updated_at=r["updated_at"])


class StepStatements(StoreBase):
    # -- reads -----------------------------------------------------------------------------

    def steps(self, run_id: str, *, newest_first: bool = False) -> list[Step]:
        order = "DESC" if newest_first else "ASC"
        with self.db.connection() as conn:
            rows = conn.execute(
                f"SELECT {STEP_COLUMNS} FROM saga_log WHERE run_id = %s ORDER BY step_idx {order}",
                (run_id,),
            ).fetchall()
        return [step_from_row(r) for r in rows]

    def step(self, run_id: str, step_idx: int) -> Step | None:
        with self.db.connection() as conn:
            row = conn.execute(
                f"SELECT {STEP_COLUMNS} FROM saga_log WHERE run_id = %s AND step_idx = %s",
                (run_id, step_idx),
            ).fetchone()
        return None if row is None else step_from_row(row)

    def step_by_key(self, key: str) -> Step | None:
        with self.db.connection() as conn:
            row = conn.execute(
                f"SELECT {STEP_COLUMNS} FROM saga_log WHERE idempotency_key = %s", (key,)
            ).fetchone()
        return None if row is None else step_from_row(row)

    def newest_step(self, run_id: str) -> Step | None:
        with self.db.connection() as conn:
            row = conn.execute(
                f"SELECT {STEP_COLUMNS} FROM saga_log WHERE run_id = %s"
                " ORDER BY step_idx DESC LIMIT 1",
                (run_id,),
            ).fetchone()
        return None if row is None else step_from_row(row)

    def unsettled(self, limit: int | None = None) -> list[Step]:
        """Every INTENDED or UNKNOWN row of every run (for reconcile at scale)."""
        with self.db.connection() as conn:
            rows = conn.execute(
                f"SELECT {STEP_COLUMNS} FROM saga_log WHERE {_UNSETTLED_SQL}"
                " ORDER BY run_id, step_idx LIMIT %s",
                (limit,),
            ).fetchall()
        return [step_from_row(r) for r in rows]

    def commits_taken(self, run_id: str) -> set[int]:
        """The approved commit steps (R10) a live row of the run carries out already."""
        with self.db.connection() as conn:
            rows = conn.execute(
                "SELECT commit_index FROM saga_log WHERE run_id = %s AND commit_index IS NOT NULL"
                f" AND status NOT IN ({_NOT_LIVE_SQL})", (run_id,)).fetchall()
        return {int(r[0]) for r in rows}

    # -- the fenced writes (R12) -----------------------------------------------------------

    def _fenced_write(self, write: str, params: dict[str, Any], *, durable: bool,
                      allow_ended: bool,
                      make: Callable[[tuple[Any, ...]], Step] | None = None) -> Step | None:
        """One write under the R12 check, in one statement (`agentsaga.store.fencing`).

        `write` is an INSERT or UPDATE of `saga_log` with `{fence}` in its WHERE clause and
        `RETURNING STEP_COLUMNS` (or the columns `make` builds the step from). Returns the
        written step, or None when the write matched nothing; raises RunNotFound, Fenced or
        RunEnded."""
        sql = fenced_sql(write, allow_ended)
        # one autocommit statement: its own transaction
        with (self.db.connection(durable=durable or not self.async_outcomes) as conn,
              conn.cursor(row_factory=tuple_row) as cur):
            row = cur.execute(sql, params).fetchone()
        return self._answered(row, params["run_id"], params["epoch"], allow_ended, make)

    def _answered(self, row: tuple[Any, ...] | None, run_id: str, epoch: int,
                  allow_ended: bool,
                  make: Callable[[tuple[Any, ...]], Step] | None) -> Step | None:
        """What a fenced write found: the run's epoch and state, then the written columns
        (NULLs when nothing was written). Raises as `check_answer` does."""
        current, state = (None, None) if row is None else (row[0], row[1])
        written = row is not None and row[2] is not None
        if current != epoch or state != RunState.RUNNING or not written:
            self.forget(run_id)
        check_answer(run_id, epoch, current, state, allow_ended=allow_ended)
        if row is None or not written:
            return None
        return step_from_row(row[2:]) if make is None else make(row[2:])

    def record_intent(self, run_id: str, epoch: int, step_idx: int, *, tool: str,
                      tool_class: str, key: str, args: dict[str, Any],
                      compensation: dict[str, Any] | None, audience: Sequence[str],
                      after_pivot: bool = False, commit_index: int | None = None,
                      timing: TimeContract = DEFAULT_TIMING,
                      contract: dict[str, Any] | None = None,
                      contract_hash: str | None = None) -> Step | None:
        """R2: commit the INTENDED row, durably, before the call. The only place it is written.
        `commit_index`: the approved commit step this is (R10; each runs once). `timing`: the
        tool's time contract; the deadline is now() + its call timeout, by Postgres's clock (R7).
        `contract`, `contract_hash`: the tool's contract the step runs under (unwind runs only
        the compensation it declares, `agentsaga.saga.contracts`).

        Returns None when the step already exists (another writer got there first). The
        returned step is built from what was sent; only what the database assigns (the row's
        times) is read back."""
        args_param, stored_args = to_stored_json(args)
        comp_param, stored_comp = to_stored_json(compensation)

        def written(times: tuple[Any, ...]) -> Step:
            created_at, updated_at = times
            return Step(run_id=run_id, step_idx=step_idx, tool=tool, tool_class=tool_class,
                        idempotency_key=key, args=stored_args, status=StepStatus.INTENDED,
                        external_ref=None, result=None, error=None, compensation=stored_comp,
                        audience=list(audience), after_pivot=after_pivot, comp_key=None,
                        comp_status=None, comp_result=None, writer_epoch=epoch,
                        created_at=created_at, updated_at=updated_at,
                        contract_hash=contract_hash, contract=contract)

        step = self._fenced_write(
            "INSERT INTO saga_log (run_id, step_idx, tool, tool_class, idempotency_key, args,"
            " status, compensation, audience, after_pivot, writer_epoch, commit_index,"
            " deadline, visible_within_s, dedupes_for_s, contract_hash, contract)"
            " SELECT %(run_id)s, %(step_idx)s, %(tool)s, %(cls)s, %(key)s, %(args)s, 'INTENDED',"
            " %(comp)s, %(audience)s::text[], %(after_pivot)s, %(epoch)s, %(commit)s,"
            " now() + make_interval(secs => %(timeout)s), %(visible)s, %(dedupes)s,"
            " %(contract_hash)s, %(contract)s"
            " WHERE {fence}"
            # R3 in the statement itself: no new step while one is unsettled (whatever this
            # process remembers, e.g. an async outcome lost to a Postgres crash)
            " AND NOT EXISTS (SELECT 1 FROM saga_log u WHERE u.run_id = %(run_id)s"
            f" AND u.{_UNSETTLED_SQL})"
            " ON CONFLICT DO NOTHING RETURNING created_at, updated_at",
            {"run_id": run_id, "step_idx": step_idx, "tool": tool, "cls": tool_class,
             "key": key, "args": args_param, "comp": comp_param,
             "audience": text_array(audience), "after_pivot": after_pivot, "epoch": epoch,
             "commit": commit_index, "timeout": timing.call_timeout_s,
             "visible": timing.visible_within_s, "dedupes": timing.dedupes_for_s,
             "contract_hash": contract_hash, "contract": to_contract_json(contract, contract_hash)},
            durable=True, allow_ended=False, make=written)
        if step is None:
            self.forget(run_id)  # the next dispatch reads what is really there
        else:
            self._cursors.advance(run_id, step)
        return step

    def record_outcome(self, run_id: str, epoch: int, step_idx: int, status: StepStatus, *,
                       result: Any = None, external_ref: str | None = None,
                       error: str | None = None,
                       expect: Sequence[StepStatus] = tuple(sorted(UNSETTLED)),
                       allow_ended: bool = True, intended: Step | None = None) -> Step | None:
        """Move an unsettled row to its outcome. Returns None if it was not in `expect`.

        `intended`: the row as this process wrote it (record_intent, under this epoch). Only
        the columns the outcome changes are then read back; the rest are the intended row's
        (no other writer can have changed them: it would have bumped the epoch first, and this
        write would be refused).

        The commit need not wait for the WAL flush (async outcomes): losing it to a Postgres
        crash leaves the INTENDED row, which reconcile settles by key (R7). With group commit
        (`agentsaga.store.group_commit`) a dispatch's outcome (`intended` given, the default
        `expect`) is written in a batch with concurrent ones, and this returns once that batch
        committed."""
        known = (intended if intended is not None and intended.run_id == run_id
                 and intended.step_idx == step_idx and intended.writer_epoch == epoch else None)
        if known is not None and self.group_commit is not None and set(expect) == UNSETTLED:
            step = self._grouped_outcome(known, epoch, status, result=result,
                                         external_ref=external_ref, error=error,
                                         allow_ended=allow_ended)
        else:
            step = self._single_outcome(run_id, epoch, step_idx, status, result=result,
                                        external_ref=external_ref, error=error, expect=expect,
                                        allow_ended=allow_ended, known=known)
        if step is not None:
            self._cursors.advance(run_id, step)
            self.hooks.on_outcome(step)
        return step

    def _single_outcome(self, run_id: str, epoch: int, step_idx: int, status: StepStatus, *,
                        result: Any, external_ref: str | None, error: str | None,
                        expect: Sequence[StepStatus], allow_ended: bool,
                        known: Step | None) -> Step | None:
        """Today's path: the outcome as its own fenced autocommit statement."""
        returning = STEP_COLUMNS if known is None else _OUTCOME_COLUMNS
        return self._fenced_write(
            _outcome_sql(status_in(tuple(expect)), returning),
            {"status": str(status), "result": to_json(result), "ref": external_ref,
             "error": redact_optional(error), "run_id": run_id, "step_idx": step_idx,
             "epoch": epoch},
            durable=False, allow_ended=allow_ended,
            make=None if known is None else functools.partial(_with_outcome, known))

    def _grouped_outcome(self, known: Step, epoch: int, status: StepStatus, *, result: Any,
                         external_ref: str | None, error: str | None,
                         allow_ended: bool) -> Step | None:
        """The outcome through the group commit (`agentsaga.store.group_commit`): returns, or
        raises, exactly as `_single_outcome` would, once the batch holding the row committed
        (or failed: then as today's statement failing, `LogUnavailable` or `LogRefused`)."""
        assert self.group_commit is not None
        pending = Pending(known.run_id, known.step_idx, {
            "run_id": known.run_id, "step_idx": known.step_idx, "epoch": epoch,
            "status": str(status), "result": to_json(result), "ref": external_ref,
            "error": redact_optional(error), "ended_ok": allow_ended})
        self.group_commit.submit(pending)
        if pending.error is not None:
            if isinstance(pending.error, psycopg.Error):
                raise translate(self.db.dsn, pending.error) from pending.error
            raise pending.error
        return self._answered(pending.answer, known.run_id, epoch, allow_ended,
                              functools.partial(_with_outcome, known))

    def write_outcomes(self, batch: list[Pending]) -> None:
        """One batch of the group commit: every row in one multi-row UPDATE, each under its own
        epoch fence (R12: a stale writer's row is refused and changes nothing, the others are
        written), committed as one autocommit statement on the outcome sessions (no WAL flush
        wait, as `async`). If Postgres refuses the statement (a value it rejects, a lost
        privilege, a deadlock), nothing of it was written, and each row is written again on
        its own, so that only a row at fault fails, as it would have today; if the server is
        gone, every row of the batch fails as today's statement would (`LogUnavailable`: the
        dispatch answers UNKNOWN and the row stays INTENDED, R5)."""
        try:
            self._write_batch(batch)
        except LogUnavailable as exc:
            if len(batch) == 1 or not _row_at_fault(exc):
                for pending in batch:
                    pending.error = _cause(exc)
                return
            for pending in batch:
                try:
                    self._write_batch([pending])
                except LogUnavailable as one:
                    pending.error = _cause(one)

    def _write_batch(self, batch: list[Pending]) -> None:
        def column(name: str) -> list[Any]:
            return [p.params[name] for p in batch]
        with (self.db.connection(durable=False) as conn,
              conn.cursor(row_factory=tuple_row) as cur):
            if len(batch) == 1:  # a lone outcome: today's single-row statement
                [pending] = batch
                pending.answer = cur.execute(
                    fenced_sql(_lone_outcome_sql(), pending.params["ended_ok"]),
                    pending.params).fetchone()
                return
            rows = cur.execute(_batch_sql(), {
                "i": list(range(len(batch))), "run_id": column("run_id"),
                "step_idx": column("step_idx"), "epoch": column("epoch"),
                "status": column("status"), "result": column("result"), "ref": column("ref"),
                "error": column("error"), "ended_ok": column("ended_ok")}).fetchall()
        for row in rows:
            batch[row[0]].answer = tuple(row[1:])

    def record_compensation(self, run_id: str, epoch: int, step_idx: int,
                            comp_status: CompensationStatus, *, comp_key: str | None = None,
                            comp_result: Any = None, compensated: bool = False,
                            error: str | None = None) -> Step:
        """R8: the compensation's own progress; `compensated=True` marks the row COMPENSATED."""
        self.forget(run_id)
        with self.db.transaction(durable=True) as conn:
            check_epoch(conn, run_id, epoch, allow_ended=True)
            row = conn.execute(
                "UPDATE saga_log SET comp_status = %s, comp_key = COALESCE(%s, comp_key),"
                " comp_result = COALESCE(%s, comp_result),"
                " status = CASE WHEN %s THEN 'COMPENSATED' ELSE status END,"
                " error = COALESCE(%s, error), updated_at = now()"
                f" WHERE run_id = %s AND step_idx = %s RETURNING {STEP_COLUMNS}",
                (str(comp_status), comp_key, to_json(comp_result), compensated,
                 redact_optional(error), run_id, step_idx),
            ).fetchone()
        if row is None:
            raise LookupError(f"run {run_id!r} has no step {step_idx}")
        step = step_from_row(row)
        self.hooks.on_compensation(step, comp_status, compensated)
        return step
