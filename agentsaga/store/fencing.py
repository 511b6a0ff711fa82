"""R12, one writer per run: every write to a run checks that the writer holds the run's current
owner epoch, under a share lock on the run row held to commit. Both forms live here:

    check_epoch      inside a transaction, before its writes (run rows, compensations,
                     corrections)
    fenced_sql       one autocommit statement that checks and writes together (the hot path:
                     the INTENDED row and the outcome)
    fenced_batch_sql the same for many rows of many runs at once, each row under its own
                     writer's epoch (group commit of outcomes, `agentsaga.store.group_commit`)

A refused write raises `Fenced` (another owner adopted the run) and changes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

from agentsaga.errors import Fenced, RunEnded, RunNotFound
from agentsaga.states import OPEN_RUN_STATES, StepStatus
from agentsaga.store.connections import Connection

OPEN_STATES_SQL = ", ".join(f"'{state}'" for state in sorted(OPEN_RUN_STATES))


def ended(run_id: str, state: str) -> RunEnded:
    return RunEnded(f"run {run_id!r} has ended ({state}); no more calls")


def check_epoch(conn: Connection, run_id: str, epoch: int, *, allow_ended: bool = False) -> None:
    """R12: the writer's epoch must be the run's current one (share lock held to commit)."""
    row = conn.execute(
        "SELECT owner_epoch, state FROM saga_runs WHERE run_id = %s FOR SHARE", (run_id,)
    ).fetchone()
    if row is None:
        raise RunNotFound(run_id)
    current, state = row
    if current != epoch:
        raise Fenced(run_id, epoch, current)
    if not allow_ended and state not in OPEN_RUN_STATES:
        raise ended(run_id, state)


def check_answer(run_id: str, epoch: int, current: int | None, state: str | None, *,
                 allow_ended: bool) -> None:
    """What `fenced_sql`'s statement found about the run: raises as `check_epoch` does."""
    if current is None or state is None:
        raise RunNotFound(run_id)
    if current != epoch:
        raise Fenced(run_id, epoch, current)
    if not allow_ended and state not in OPEN_RUN_STATES:
        raise ended(run_id, state)


# The statements are built at each use (a microsecond or two against a commit's hundreds), not
# cached: `make mutate` forks its test sessions from a process that ran the tests already, and
# mutmut leaves decorated functions alone.
def fenced_sql(write: str, allow_ended: bool) -> str:
    """One statement: the run row locked, the epoch (and, unless `allow_ended`, the open state)
    checked in the write's WHERE clause (`{fence}` in `write`), the run's epoch and state
    returned with the written row (NULLs when nothing was written)."""
    state = "" if allow_ended else f" AND run.state IN ({OPEN_STATES_SQL})"
    fence = f"EXISTS (SELECT 1 FROM run WHERE run.owner_epoch = %(epoch)s{state})"
    return ("WITH run AS (SELECT owner_epoch, state FROM saga_runs WHERE run_id = %(run_id)s"
            f" FOR SHARE), w AS ({write.replace('{fence}', fence)})"
            " SELECT run.owner_epoch, run.state, w.* FROM run LEFT JOIN w ON true")


def status_in(expect: Sequence[StepStatus]) -> str:
    """`status IN (...)` for statuses of the closed set (constants in the statement, so that
    nothing is adapted per call)."""
    if not expect:
        return "false"
    return "status IN (" + ", ".join(f"'{StepStatus(s)}'" for s in expect) + ")"


def fenced_batch_sql(rows: str, write: str, returned: Sequence[str]) -> str:
    """`fenced_sql` for many rows in one statement. `rows` selects one row per write with at
    least `i` (its position), `run_id`, `epoch` (the writer's) and `ended_ok` (whether an ended
    run may be written, `allow_ended`); `write` is an UPDATE `FROM v, run` with `{fence}` in its
    WHERE clause, returning `v.i AS i` and the `returned` columns. Every run of the batch is
    locked as `fenced_sql` locks one (in run_id order); a row is written only under its own
    epoch. For each row, in any order: its `i`, the run's epoch and state, then the returned
    columns (NULLs when nothing was written)."""
    fence = ("run.run_id = v.run_id AND run.owner_epoch = v.epoch"
             f" AND (v.ended_ok OR run.state IN ({OPEN_STATES_SQL}))")
    written = ", ".join(f"w.{column}" for column in returned)
    return (f"WITH v AS ({rows}), run AS (SELECT run_id, owner_epoch, state FROM saga_runs"
            " WHERE run_id IN (SELECT run_id FROM v) ORDER BY run_id FOR SHARE),"
            f" w AS ({write.replace('{fence}', fence)})"
            f" SELECT v.i, run.owner_epoch, run.state, {written}"
            " FROM v LEFT JOIN run ON run.run_id = v.run_id LEFT JOIN w ON w.i = v.i")
