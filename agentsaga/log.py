"""The saga log in Postgres (R2, R11, R12): the log, not the transcript, is the truth.

Public methods own their transaction; every write checks the run's owner epoch under a share
lock on the run row, so a writer whose epoch was bumped by an adopter is refused (`Fenced`).
"""

from __future__ import annotations

import functools
import json
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, get_args

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row, tuple_row
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool

from agentsaga import migrations, telemetry
from agentsaga.cursors import Cursors
from agentsaga.errors import ConfigurationError, DatabaseUnavailable, Fenced, RunEnded, RunNotFound
from agentsaga.records import (
    OPEN_STATES,
    RUN_AND_NEWEST,
    RUN_COLUMNS,
    RUN_WIDTH,
    STEP_COLUMNS,
    UNSETTLED,
    Adoption,
    Run,
    Step,
    StepStatus,
)
from agentsaga.redact import redact_optional, redact_text

__all__ = ["OPEN_STATES", "UNSETTLED", "Adoption", "Run", "SagaLog", "Step", "StepStatus"]

log = logging.getLogger(__name__)

def _session(synchronous_commit: str) -> Callable[[psycopg.Connection[Any]], None]:
    """A pool's `configure`: statements prepared on first use, the session's commit mode."""
    def configure(conn: psycopg.Connection[Any]) -> None:
        conn.prepare_threshold = 0
        conn.execute(f"SET synchronous_commit TO {synchronous_commit}")
    return configure


def _where(dsn: str) -> str:
    """host:port/dbname of a DSN, for messages (never the password)."""
    try:
        info = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "an unparsable DSN"
    host = info.get("host") or "localhost"
    return f"{host}:{info.get('port') or 5432}/{info.get('dbname') or ''}"


def _json(value: Any) -> Jsonb | None:
    return None if value is None else Jsonb(value, dumps=_dumps)


def _dumps(value: Any) -> str:
    """Every JSON value the log stores; card numbers are masked here, once, for all of them."""
    return redact_text(json.dumps(value, default=str, separators=(",", ":")))


_STATUSES = frozenset(get_args(StepStatus))
_OPEN = ", ".join(f"'{state}'" for state in OPEN_STATES)


@functools.lru_cache(maxsize=64)
def _fenced_sql(write: str, allow_ended: bool) -> str:
    """The statement of `SagaLog._fenced_write`: the run row locked, the epoch (and, unless
    `allow_ended`, the open state) checked in the write's WHERE clause, the run's epoch and
    state returned with the written row (NULLs when nothing was written)."""
    state = "" if allow_ended else f" AND run.state IN ({_OPEN})"
    fence = f"EXISTS (SELECT 1 FROM run WHERE run.owner_epoch = %(epoch)s{state})"
    return ("WITH run AS (SELECT owner_epoch, state FROM saga_runs WHERE run_id = %(run_id)s"
            f" FOR SHARE), w AS ({write.replace('{fence}', fence)})"
            " SELECT run.owner_epoch, run.state, w.* FROM run LEFT JOIN w ON true")


@functools.lru_cache(maxsize=64)
def _status_in(expect: Sequence[str]) -> str:
    """`status IN (...)` for statuses of the closed set (constants in the statement, so that
    nothing is adapted per call)."""
    unknown = set(expect) - _STATUSES
    if unknown:
        raise ValueError(f"not a step status: {sorted(unknown)}")
    if not expect:
        return "false"
    return "status IN (" + ", ".join(f"'{s}'" for s in expect) + ")"


_OUTCOME_COLUMNS = "status, external_ref, result, error, updated_at"


def _with_outcome(step: Step, row: tuple[Any, ...]) -> Step:
    """`step` with the columns an outcome write changes (_OUTCOME_COLUMNS, in order)."""
    status, external_ref, result, error, updated_at = row
    return Step(step.run_id, step.step_idx, step.tool, step.tool_class, step.idempotency_key,
                step.args, status, external_ref, result, error, step.compensation,
                step.audience, step.after_pivot, step.comp_key, step.comp_status,
                step.comp_result, step.writer_epoch, step.created_at, updated_at)


def _text_array(values: Sequence[str]) -> str:
    """A Postgres text[] literal (cast with ::text[]): a string adapts much faster than a
    list."""
    if not values:
        return "{}"
    quoted = ('"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"' for v in values)
    return "{" + ",".join(quoted) + "}"


class SagaLog:
    """The saga log of one database. Thread-safe; share one per process."""

    def __init__(self, dsn: str, *, min_size: int = 2, max_size: int = 16,
                 async_outcomes: bool = True) -> None:
        self.dsn = dsn
        self.async_outcomes = async_outcomes
        # Every statement is prepared on first use (the hot path is a handful of statements).
        # The main pool's sessions commit durably (R2) whatever the server's default is.
        self.pool: ConnectionPool[psycopg.Connection[dict[str, Any]]] = ConnectionPool(
            dsn,
            min_size=min_size,
            max_size=max_size,
            kwargs={"row_factory": dict_row, "autocommit": True},
            configure=_session("on"),
            open=False,
            name="agentsaga",
        )
        # The newest step of each run this process writes, as of its own last write (R12: any
        # other writer bumps the epoch first, so a cursor is used only under the epoch it was
        # read with, and the fenced write still refuses a stale one). See `cursor`.
        self._cursors = Cursors()
        # Outcome writes with async outcomes: sessions that do not wait for the WAL flush, so
        # each outcome is one autocommit statement (no BEGIN / SET LOCAL / COMMIT round trips).
        self.outcome_pool: ConnectionPool[psycopg.Connection[dict[str, Any]]] | None = None
        if async_outcomes:
            self.outcome_pool = ConnectionPool(
                dsn,
                min_size=1,
                max_size=max_size,
                kwargs={"row_factory": dict_row, "autocommit": True},
                configure=_session("off"),
                open=False,
                name="agentsaga-outcomes",
            )

    # -- lifecycle -------------------------------------------------------------------------

    def open(self, *, migrate: bool = True, timeout: float = 30.0) -> SagaLog:
        """Wait up to `timeout` seconds for Postgres (it may still be starting), then open the
        pools and apply missing migrations; `DatabaseUnavailable` says why it could not."""
        self._wait_reachable(timeout)
        self.pool.open(wait=True, timeout=timeout)
        if self.outcome_pool is not None:
            self.outcome_pool.open(wait=False)  # its first connection arrives meanwhile
        if migrate:
            self.migrate()
        return self

    def _wait_reachable(self, timeout: float) -> None:
        try:
            conninfo_to_dict(self.dsn)
        except psycopg.ProgrammingError:
            raise ConfigurationError(
                "the saga log's DSN (AGENTSAGA_DSN or --dsn) is malformed; use a URL such as "
                "postgresql://user:password@host:5432/dbname") from None
        deadline = time.monotonic() + timeout
        while True:
            try:
                psycopg.connect(self.dsn, connect_timeout=max(1, int(timeout))).close()
                return
            except psycopg.OperationalError as exc:
                if time.monotonic() >= deadline:
                    raise DatabaseUnavailable(_where(self.dsn), timeout, exc) from None
                log.warning("waiting for the saga log's Postgres (%s): %s", _where(self.dsn),
                            str(exc).strip().splitlines()[0])
                time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))

    def close(self) -> None:
        if self.outcome_pool is not None:
            self.outcome_pool.close()
        self.pool.close()

    def __enter__(self) -> SagaLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def migrate(self) -> list[str]:
        """Apply missing migrations; one read when the schema is already current."""
        wanted = {version for version, _, _ in migrations.available()}
        with self.pool.connection() as conn:
            table = conn.execute("SELECT to_regclass('schema_migrations') AS t").fetchone()
            if table is not None and table["t"] is not None:
                done = {r["version"] for r in conn.execute("SELECT version FROM schema_migrations")}
                if wanted <= done:
                    return []
            conn.prepare_threshold = None  # migration files hold many statements
            try:
                applied = migrations.migrate(conn)
            finally:
                conn.prepare_threshold = 0
        for name in applied:
            log.info("applied migration %s", name)
        return applied

    @contextmanager
    def _tx(self) -> Iterator[psycopg.Connection[dict[str, Any]]]:
        with self.pool.connection() as conn, conn.transaction():
            yield conn

    # -- runs ------------------------------------------------------------------------------

    def begin_run(self, run_id: str, *, agent: str = "", owner: str = "", pod_uid: str = "",
                  namespace: str = "", trace_context: dict[str, Any] | None = None) -> Adoption:
        """Create the run, or adopt it by bumping its owner epoch (R12)."""
        self.forget(run_id)
        with self._tx() as conn:
            row = conn.execute(
                "INSERT INTO saga_runs (run_id, agent, owner, pod_uid, namespace, trace_context)"
                " VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (run_id) DO NOTHING"
                f" RETURNING {RUN_COLUMNS}",
                (run_id, agent, owner, pod_uid, namespace, _json(trace_context)),
            ).fetchone()
            if row is not None:
                return Adoption(Run(**row), adopted=False)
            row = conn.execute(
                "UPDATE saga_runs SET owner_epoch = owner_epoch + 1, owner = %s,"
                " pod_uid = %s, namespace = COALESCE(NULLIF(%s, ''), namespace),"
                " updated_at = now() WHERE run_id = %s"
                f" RETURNING {RUN_COLUMNS}",
                (owner, pod_uid, namespace, run_id),
            ).fetchone()
            assert row is not None
            return Adoption(Run(**row), adopted=True)

    def adopt(self, run_id: str, owner: str) -> Run:
        """Take over an existing run (a resumed pod, a reconcile/unwind job): bump the epoch."""
        self.forget(run_id)
        with self._tx() as conn:
            row = conn.execute(
                "UPDATE saga_runs SET owner_epoch = owner_epoch + 1, owner = %s, updated_at = now()"
                f" WHERE run_id = %s RETURNING {RUN_COLUMNS}",
                (owner, run_id),
            ).fetchone()
        if row is None:
            raise RunNotFound(run_id)
        return Run(**row)

    def run(self, run_id: str) -> Run | None:
        with self.pool.connection() as conn:
            row = conn.execute(
                f"SELECT {RUN_COLUMNS} FROM saga_runs WHERE run_id = %s", (run_id,)
            ).fetchone()
        return None if row is None else Run(**row)

    def require_run(self, run_id: str) -> Run:
        found = self.run(run_id)
        if found is None:
            raise RunNotFound(run_id)
        return found

    def runs(self, *, states: Sequence[str] | None = None) -> list[Run]:
        with self.pool.connection() as conn:
            if states is None:
                rows = conn.execute(f"SELECT {RUN_COLUMNS} FROM saga_runs ORDER BY created_at")
            else:
                rows = conn.execute(
                    f"SELECT {RUN_COLUMNS} FROM saga_runs WHERE state = ANY(%s)"
                    " ORDER BY created_at",
                    (list(states),),
                )
            return [Run(**r) for r in rows.fetchall()]

    def set_run_state(self, run_id: str, epoch: int, state: str, *, end: bool = False) -> None:
        self.forget(run_id)
        with self._tx() as conn:
            self._check_epoch(conn, run_id, epoch, allow_ended=True)
            conn.execute(
                "UPDATE saga_runs SET state = %s, updated_at = now(),"
                " ended_at = CASE WHEN %s THEN now() ELSE ended_at END WHERE run_id = %s",
                (state, end, run_id),
            )

    def update_run(self, run_id: str, epoch: int, *, pivot: dict[str, Any] | None = None,
                   state: str | None = None, count_irreversible: bool = False) -> Run:
        """Change the pivot record, the state or the irreversible-before-pivot count (R10)."""
        self.forget(run_id)
        with self._tx() as conn:
            self._check_epoch(conn, run_id, epoch, allow_ended=True)
            row = conn.execute(
                "UPDATE saga_runs SET pivot = COALESCE(%s, pivot), state = COALESCE(%s, state),"
                " irreversible_before_pivot = irreversible_before_pivot + %s,"
                f" updated_at = now() WHERE run_id = %s RETURNING {RUN_COLUMNS}",
                (_json(pivot), state, 1 if count_irreversible else 0, run_id),
            ).fetchone()
        assert row is not None
        return Run(**row)

    def decide_pivot(self, run_id: str, plan_hash: str, record: dict[str, Any],
                     state: str) -> bool:
        """Record a decision iff the staged plan is still `plan_hash` and undecided (no epoch:
        the decision is a human's, not the run owner's)."""
        self.forget(run_id)
        with self._tx() as conn:
            row = conn.execute(
                "UPDATE saga_runs SET pivot = %s, state = %s, updated_at = now()"
                " WHERE run_id = %s AND pivot->>'planHash' = %s"
                " AND pivot->>'state' = 'AwaitingApproval' RETURNING run_id",
                (_json(record), state, run_id, plan_hash),
            ).fetchone()
        return row is not None

    def _check_epoch(self, conn: psycopg.Connection[dict[str, Any]], run_id: str, epoch: int,
                     *, allow_ended: bool = False) -> None:
        """R12: the writer's epoch must be the run's current one (share lock held to commit)."""
        row = conn.execute(
            "SELECT owner_epoch, state FROM saga_runs WHERE run_id = %s FOR SHARE", (run_id,)
        ).fetchone()
        if row is None:
            raise RunNotFound(run_id)
        if row["owner_epoch"] != epoch:
            raise Fenced(run_id, epoch, row["owner_epoch"])
        if not allow_ended and row["state"] not in OPEN_STATES:
            raise RunEnded(f"run {run_id!r} has ended ({row['state']}); no more calls")

    def _fenced_write(self, write: str, params: dict[str, Any], *, durable: bool,
                      allow_ended: bool,
                      make: Callable[[tuple[Any, ...]], Step] | None = None) -> Step | None:
        """One write under the R12 check, in one statement (the check used to be its own).

        `write` is an INSERT or UPDATE of `saga_log` with `{fence}` in its WHERE clause and
        `RETURNING STEP_COLUMNS` (or the columns `make` builds the step from); the statement
        locks the run row (FOR SHARE, held to commit) and writes only if `params["epoch"]` is
        the run's current epoch (and the run is open unless `allow_ended`). Returns the written
        step, or None when the write matched nothing; raises RunNotFound, Fenced or RunEnded as
        `_check_epoch` does."""
        sql = _fenced_sql(write, allow_ended)
        # one autocommit statement: its own transaction, committed durably on the main pool
        pool = self.pool if durable or self.outcome_pool is None else self.outcome_pool
        with pool.connection() as conn, conn.cursor(row_factory=tuple_row) as cur:
            row = cur.execute(sql, params).fetchone()
        run_id, epoch = params["run_id"], params["epoch"]
        if row is None:
            self.forget(run_id)
            raise RunNotFound(run_id)
        current, state, written = row[0], row[1], row[2] is not None
        if current != epoch or state != "running" or not written:
            self.forget(run_id)
        if current != epoch:
            raise Fenced(run_id, epoch, current)
        if not allow_ended and state not in OPEN_STATES:
            raise RunEnded(f"run {run_id!r} has ended ({state}); no more calls")
        if not written:
            return None
        return Step(*row[2:]) if make is None else make(row[2:])

    def run_and_newest(self, run_id: str) -> tuple[Run | None, Step | None]:
        """The run and its newest step, in one statement (remembered as the run's cursor)."""
        generation = self._cursors.generation
        with self.pool.connection() as conn, conn.cursor(row_factory=tuple_row) as cur:
            row = cur.execute(RUN_AND_NEWEST, (run_id,)).fetchone()
        if row is None:
            return None, None
        run = Run(*row[:RUN_WIDTH])
        step = None if row[RUN_WIDTH] is None else Step(*row[RUN_WIDTH:])
        self._cursors.remember(run, step, generation)
        return run, step

    def cursor(self, run_id: str, epoch: int) -> tuple[Run, Step | None] | None:
        """The run and its newest step as this process last wrote them under `epoch`, or None
        (see `agentsaga.cursors`)."""
        return self._cursors.get(run_id, epoch)

    def forget(self, run_id: str) -> None:
        """Drop the run's cursor (the next dispatch reads the run and its newest step again)."""
        self._cursors.forget(run_id)

    # -- steps -----------------------------------------------------------------------------

    def steps(self, run_id: str, *, newest_first: bool = False) -> list[Step]:
        order = "DESC" if newest_first else "ASC"
        with self.pool.connection() as conn:
            rows = conn.execute(
                f"SELECT {STEP_COLUMNS} FROM saga_log WHERE run_id = %s ORDER BY step_idx {order}",
                (run_id,),
            ).fetchall()
        return [Step(**r) for r in rows]

    def step(self, run_id: str, step_idx: int) -> Step | None:
        with self.pool.connection() as conn:
            row = conn.execute(
                f"SELECT {STEP_COLUMNS} FROM saga_log WHERE run_id = %s AND step_idx = %s",
                (run_id, step_idx),
            ).fetchone()
        return None if row is None else Step(**row)

    def step_by_key(self, key: str) -> Step | None:
        with self.pool.connection() as conn:
            row = conn.execute(
                f"SELECT {STEP_COLUMNS} FROM saga_log WHERE idempotency_key = %s", (key,)
            ).fetchone()
        return None if row is None else Step(**row)

    def newest_step(self, run_id: str) -> Step | None:
        with self.pool.connection() as conn:
            row = conn.execute(
                f"SELECT {STEP_COLUMNS} FROM saga_log WHERE run_id = %s"
                " ORDER BY step_idx DESC LIMIT 1",
                (run_id,),
            ).fetchone()
        return None if row is None else Step(**row)

    def unsettled(self, limit: int | None = None) -> list[Step]:
        """Every INTENDED or UNKNOWN row of every run (for reconcile at scale)."""
        with self.pool.connection() as conn:
            rows = conn.execute(
                f"SELECT {STEP_COLUMNS} FROM saga_log WHERE status IN ('INTENDED', 'UNKNOWN')"
                " ORDER BY run_id, step_idx LIMIT %s",
                (limit,),
            ).fetchall()
        return [Step(**r) for r in rows]

    def record_intent(self, run_id: str, epoch: int, step_idx: int, *, tool: str,
                      tool_class: str, key: str, args: dict[str, Any],
                      compensation: dict[str, Any] | None, audience: Sequence[str],
                      after_pivot: bool = False, commit_index: int | None = None
                      ) -> Step | None:
        """R2: commit the INTENDED row, durably, before the call. The only place it is written.
        `commit_index`: the approved commit step this is (R10; each runs once).

        Returns None when the step already exists (another writer got there first).
        """
        step = self._fenced_write(
            "INSERT INTO saga_log (run_id, step_idx, tool, tool_class, idempotency_key, args,"
            " status, compensation, audience, after_pivot, writer_epoch, commit_index)"
            " SELECT %(run_id)s, %(step_idx)s, %(tool)s, %(cls)s, %(key)s, %(args)s, 'INTENDED',"
            " %(comp)s, %(audience)s::text[], %(after_pivot)s, %(epoch)s, %(commit)s"
            " WHERE {fence}"
            # R3 in the statement itself: no new step while one is unsettled (whatever this
            # process remembers, e.g. an async outcome lost to a Postgres crash)
            " AND NOT EXISTS (SELECT 1 FROM saga_log u WHERE u.run_id = %(run_id)s"
            " AND u.status IN ('INTENDED', 'UNKNOWN'))"
            f" ON CONFLICT DO NOTHING RETURNING {STEP_COLUMNS}",
            {"run_id": run_id, "step_idx": step_idx, "tool": tool, "cls": tool_class,
             "key": key, "args": _json(args), "comp": _json(compensation),
             "audience": _text_array(audience), "after_pivot": after_pivot, "epoch": epoch,
             "commit": commit_index},
            durable=True, allow_ended=False)
        if step is None:
            self.forget(run_id)  # the next dispatch reads what is really there
        else:
            self._cursors.advance(run_id, step)
        return step

    def commits_taken(self, run_id: str) -> set[int]:
        """The approved commit steps (R10) a live row of the run carries out already."""
        with self.pool.connection() as conn:
            rows = conn.execute(
                "SELECT commit_index FROM saga_log WHERE run_id = %s AND commit_index IS NOT NULL"
                " AND status NOT IN ('FAILED', 'NOT_EXECUTED')", (run_id,)).fetchall()
        return {int(next(iter(r.values()))) for r in rows}

    def re_intend(self, run_id: str, epoch: int, step_idx: int, *, args: dict[str, Any],
                  compensation: dict[str, Any] | None, audience: Sequence[str]) -> Step | None:
        """R2 again for a NOT_EXECUTED step that runs once more under the same key.

        Returns None if the row is no longer NOT_EXECUTED (another writer moved it)."""
        self.forget(run_id)
        with self._tx() as conn:
            conn.execute("SET LOCAL synchronous_commit TO on")
            self._check_epoch(conn, run_id, epoch)
            row = conn.execute(
                "UPDATE saga_log SET status = 'INTENDED', args = %s, compensation = %s,"
                " audience = %s, error = NULL, writer_epoch = %s, updated_at = now()"
                " WHERE run_id = %s AND step_idx = %s AND status = 'NOT_EXECUTED'"
                f" RETURNING {STEP_COLUMNS}",
                (_json(args), _json(compensation), list(audience), epoch, run_id, step_idx),
            ).fetchone()
        return None if row is None else Step(**row)

    @telemetry.outcome_recorded
    def record_outcome(self, run_id: str, epoch: int, step_idx: int, status: StepStatus, *,
                       result: Any = None, external_ref: str | None = None,
                       error: str | None = None, expect: Sequence[str] = UNSETTLED,
                       allow_ended: bool = True, intended: Step | None = None) -> Step | None:
        """Move an unsettled row to its outcome. Returns None if it was not in `expect`.

        `intended`: the row as this process wrote it (record_intent, under this epoch). Only
        the columns the outcome changes are then read back; the rest are the intended row's
        (no other writer can have changed them: it would have bumped the epoch first, and this
        write would be refused).

        The commit need not wait for the WAL flush (async outcomes): losing it to a Postgres
        crash leaves the INTENDED row, which reconcile settles by key (R7)."""
        known = (intended if intended is not None and intended.run_id == run_id
                 and intended.step_idx == step_idx and intended.writer_epoch == epoch else None)
        returning = STEP_COLUMNS if known is None else _OUTCOME_COLUMNS
        step = self._fenced_write(
            "UPDATE saga_log SET status = %(status)s, result = COALESCE(%(result)s, result),"
            " external_ref = COALESCE(%(ref)s, external_ref), error = %(error)s,"
            " updated_at = now() WHERE run_id = %(run_id)s AND step_idx = %(step_idx)s"
            f" AND {_status_in(tuple(expect))} AND {{fence}} RETURNING {returning}",
            {"status": status, "result": _json(result), "ref": external_ref,
             "error": redact_optional(error), "run_id": run_id, "step_idx": step_idx,
             "epoch": epoch},
            durable=not self.async_outcomes, allow_ended=allow_ended,
            make=None if known is None else functools.partial(_with_outcome, known))
        if step is not None:
            self._cursors.advance(run_id, step)
        return step

    @telemetry.compensation_recorded
    def record_compensation(self, run_id: str, epoch: int, step_idx: int, comp_status: str, *,
                            comp_key: str | None = None, comp_result: Any = None,
                            compensated: bool = False, error: str | None = None) -> Step:
        """R8: the compensation's own progress; `compensated=True` marks the row COMPENSATED."""
        self.forget(run_id)
        with self._tx() as conn:
            conn.execute("SET LOCAL synchronous_commit TO on")
            self._check_epoch(conn, run_id, epoch, allow_ended=True)
            row = conn.execute(
                "UPDATE saga_log SET comp_status = %s, comp_key = COALESCE(%s, comp_key),"
                " comp_result = COALESCE(%s, comp_result),"
                " status = CASE WHEN %s THEN 'COMPENSATED' ELSE status END,"
                " error = COALESCE(%s, error), updated_at = now()"
                f" WHERE run_id = %s AND step_idx = %s RETURNING {STEP_COLUMNS}",
                (comp_status, comp_key, _json(comp_result), compensated,
                 redact_optional(error), run_id, step_idx),
            ).fetchone()
        assert row is not None
        return Step(**row)
