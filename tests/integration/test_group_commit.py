"""Group commit of outcomes (`AGENTSAGA_OUTCOME_COMMIT=group`) on a real Postgres, with real
threads: every dispatch is answered with its own row once its batch committed; a stale writer's
row in a batch is refused (R12) while the others commit; a batch the server fails fails each of
its dispatches as today's single statement would, and leaves every row INTENDED.

A batch is held open deterministically by a row lock the test takes on the first row's
saga_log entry: the batch waits for it, the next outcomes queue up behind it, and once the test
sees them queued it releases the lock, and they are written as one batch."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import psycopg
import pytest

from agentsaga import step_key
from agentsaga.errors import Fenced, LogRefused, LogUnavailable
from agentsaga.service.saga_service import SagaService
from agentsaga.settings import Settings
from agentsaga.states import StepStatus
from agentsaga.store import SagaLog, Step
from agentsaga.store.group_commit import GroupCommit
from sagatest import ledger_tools
from sagatest.ledger_tools import effects
from sagatest.outcome_modes import saga_log_for
from sagatest.sidecar_fixtures import SidecarProcess
from sagatest.world_fixtures import poll_until

BLOCKER = "blocker"


@pytest.fixture
def group_log(pg: str) -> Iterator[SagaLog]:
    with saga_log_for(pg, "group", max_size=8).open(migrate=False) as log_:
        yield log_


def group_of(saga_log: SagaLog) -> GroupCommit:
    assert saga_log.group_commit is not None
    return saga_log.group_commit


def intended(saga_log: SagaLog, run_id: str) -> Step:
    """A run begun by `saga_log` with its step 0 INTENDED."""
    epoch = saga_log.begin_run(run_id).run.owner_epoch
    step = saga_log.record_intent(run_id, epoch, 0, tool="create_ticket",
                                  tool_class="compensatable",
                                  key=step_key(run_id, 0, "create_ticket"),
                                  args={"summary": run_id},
                                  compensation={"tool": "close_ticket", "args": {}},
                                  audience=["customer"])
    assert step is not None
    return step


def confirm(saga_log: SagaLog, step: Step, result: Any,
            ref: str | None = None) -> Callable[[], Step | None]:
    """What dispatch does once the call returned: the outcome, under the epoch it wrote with."""
    return lambda: saga_log.record_outcome(step.run_id, step.writer_epoch, step.step_idx,
                                           StepStatus.CONFIRMED, result=result,
                                           external_ref=ref or f"ref-{step.run_id}",
                                           intended=step)


def log_row(dsn: str, run_id: str) -> tuple[Any, ...]:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT * FROM saga_log WHERE run_id = %s", (run_id,)).fetchone()
    assert row is not None
    return tuple(row)


def status_of(dsn: str, run_id: str) -> str:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT status FROM saga_log WHERE run_id = %s",
                           (run_id,)).fetchone()
    assert row is not None
    return str(row[0])


def lock_wait_pids(dsn: str) -> list[int]:
    """Backends of this database waiting for a lock."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
            " AND wait_event_type = 'Lock'").fetchall()
    return [int(r[0]) for r in rows]


class HeldBatch:
    """The row lock that holds a batch open: `hold(run_id)` locks that run's saga_log rows in
    an open transaction; `release(run_id)` commits it."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.held: dict[str, psycopg.Connection[tuple[Any, ...]]] = {}

    def hold(self, run_id: str) -> None:
        conn = psycopg.connect(self.dsn)
        conn.execute("SELECT 1 FROM saga_log WHERE run_id = %s FOR UPDATE", (run_id,))
        self.held[run_id] = conn

    def release(self, run_id: str) -> None:
        conn = self.held.pop(run_id)
        conn.commit()
        conn.close()

    def close(self) -> None:
        for conn in self.held.values():
            conn.rollback()
            conn.close()


@pytest.fixture
def held(pg: str) -> Iterator[HeldBatch]:
    batch = HeldBatch(pg)
    yield batch
    batch.close()


def queue_behind_blocker(group_log: SagaLog, held: HeldBatch, pool: ThreadPoolExecutor,
                         writes: dict[str, Callable[[], Step | None]]
                         ) -> tuple[Future[Step | None], dict[str, Future[Step | None]]]:
    """The blocker's outcome in a batch held open by `held`, then `writes` queued behind it."""
    blocker = intended(group_log, BLOCKER)
    held.hold(BLOCKER)
    first = pool.submit(confirm(group_log, blocker, {"n": 0}))
    poll_until(lambda: lock_wait_pids(held.dsn), timeout=30)
    futures = {run_id: pool.submit(write) for run_id, write in writes.items()}
    poll_until(lambda: group_of(group_log).queued == len(writes), timeout=30)
    assert group_of(group_log).batches == 0 and not first.done()
    return first, futures


def test_concurrent_dispatches_of_many_runs_each_get_their_own_confirmed_outcome(
        pg: str, ledger: str) -> None:
    runs, per_run = 8, 6
    with saga_log_for(pg, "group", max_size=8).open(migrate=False) as saga_log:
        service = SagaService(saga_log, ledger_tools.build_registry(),
                              Settings(recheck_pause_s=0.01), sleep=lambda _: None)
        start = threading.Barrier(runs)

        def agent(run_id: str) -> list[tuple[str, int, str, Any]]:
            service.begin_run(run_id)
            start.wait(timeout=60)
            seen = []
            for n in range(per_run):
                out = service.dispatch(run_id, "create_ticket",
                                       {"summary": f"{run_id}/{n}", "order_id": str(n)})
                seen.append((str(out.outcome), out.step_idx, out.key, out.result))
            return seen

        with ThreadPoolExecutor(runs) as pool:
            answers = dict(zip([f"run-{r}" for r in range(runs)],
                               pool.map(agent, [f"run-{r}" for r in range(runs)]), strict=True))
        group = group_of(saga_log)
        assert group.rows == runs * per_run and 1 <= group.batches <= group.rows
    tickets = {t["key"]: t for t in effects(ledger, "ticket")}
    with psycopg.connect(pg) as conn:
        logged = {(r, i): (s, res) for r, i, s, res in conn.execute(
            "SELECT run_id, step_idx, status, result FROM saga_log").fetchall()}
    assert len(logged) == runs * per_run
    for run_id, seen in answers.items():
        for n, (outcome, step_idx, key, result) in enumerate(seen):
            assert (outcome, step_idx, key) == ("CONFIRMED", n, step_key(run_id, n,
                                                                          "create_ticket"))
            assert result["summary"] == f"{run_id}/{n}" == tickets[key]["body"]["summary"]
            assert logged[(run_id, n)] == ("CONFIRMED", result)


def test_a_fenced_run_in_a_batch_is_refused_while_the_others_commit(
        group_log: SagaLog, held: HeldBatch, pg: str) -> None:
    steps = {run_id: intended(group_log, run_id) for run_id in ("stale", "b", "c")}
    group_log.adopt("stale", "job")  # another writer took the run while its call was out
    stale_before = log_row(pg, "stale")
    with ThreadPoolExecutor(4) as pool:
        first, futures = queue_behind_blocker(
            group_log, held, pool,
            {run_id: confirm(group_log, step, {"run": run_id}) for run_id, step in steps.items()})
        held.release(BLOCKER)
        assert first.result(timeout=60) is not None
        with pytest.raises(Fenced):
            futures["stale"].result(timeout=60)
        written = {r: futures[r].result(timeout=60) for r in ("b", "c")}
    assert group_of(group_log).batches == 2 and group_of(group_log).rows == 4
    assert log_row(pg, "stale") == stale_before, "a fenced writer changed its row"
    for run_id, step in written.items():
        assert step is not None and step.status == StepStatus.CONFIRMED
        assert step.result == {"run": run_id} and step.external_ref == f"ref-{run_id}"
        assert status_of(pg, run_id) == "CONFIRMED"


def test_a_batch_the_server_loses_fails_every_dispatch_in_it_and_leaves_them_intended(
        group_log: SagaLog, held: HeldBatch, pg: str) -> None:
    steps = {run_id: intended(group_log, run_id) for run_id in ("a", "b", "c")}
    held.hold("b")  # the second batch waits on b's row once the first is released
    with ThreadPoolExecutor(4) as pool:
        first, futures = queue_behind_blocker(
            group_log, held, pool,
            {run_id: confirm(group_log, step, {"run": run_id}) for run_id, step in steps.items()})
        held.release(BLOCKER)
        assert first.result(timeout=60) is not None
        poll_until(lambda: group_of(group_log).batches == 1 and lock_wait_pids(pg), timeout=30)
        [waiting] = lock_wait_pids(pg)
        with psycopg.connect(pg, autocommit=True) as conn:
            conn.execute("SELECT pg_terminate_backend(%s)", (waiting,))
        raised: list[LogUnavailable] = []
        for run_id in steps:
            with pytest.raises(LogUnavailable) as lost:
                futures[run_id].result(timeout=60)
            assert type(lost.value) is LogUnavailable  # the server went away: UNKNOWN (R5)
            assert isinstance(lost.value.__cause__, psycopg.OperationalError)
            raised.append(lost.value)
        # each dispatch raises its own error: one object raised in three threads would carry
        # one traceback tangled from all three
        assert len({id(error) for error in raised}) == len(steps)
    assert group_of(group_log).batches == 2 and group_of(group_log).rows == 4
    assert {run_id: status_of(pg, run_id) for run_id in steps} == dict.fromkeys(steps, "INTENDED")
    # the log is still there for the next statement (a new connection)
    assert confirm(group_log, steps["a"], {"run": "a"})() is not None


@pytest.mark.parametrize("others", [("b",), ("b", "c")])
def test_a_row_the_server_refuses_fails_only_its_own_dispatch(
        group_log: SagaLog, held: HeldBatch, pg: str, others: tuple[str, ...]) -> None:
    steps = {run_id: intended(group_log, run_id) for run_id in ("bad", *others)}
    refs = {"bad": "nul \x00 byte", **{r: f"ref-{r}" for r in others}}  # text holds no NUL
    with ThreadPoolExecutor(4) as pool:
        first, futures = queue_behind_blocker(
            group_log, held, pool,
            {run_id: confirm(group_log, step, {"run": run_id}, refs[run_id])
             for run_id, step in steps.items()})
        held.release(BLOCKER)
        assert first.result(timeout=60) is not None
        with pytest.raises(LogRefused, match="NUL"):
            futures["bad"].result(timeout=60)
        for run_id in others:
            step = futures[run_id].result(timeout=60)
            assert step is not None and step.external_ref == refs[run_id]
    assert status_of(pg, "bad") == "INTENDED"
    assert [status_of(pg, run_id) for run_id in others] == ["CONFIRMED"] * len(others)


def test_the_sidecar_with_group_outcomes_answers_concurrent_agents(
        sidecar_factory: Callable[..., SidecarProcess], ledger: str) -> None:
    sidecar = sidecar_factory(ledger, "sagatest.ledger_tools",
                              env={"AGENTSAGA_OUTCOME_COMMIT": "group"})
    runs = [f"grpc-{n}" for n in range(6)]

    def agent(run_id: str) -> list[str]:
        client = sidecar.client()
        client.begin_run(run_id)
        return [client.dispatch(run_id, "create_ticket",
                                {"summary": f"{run_id}/{n}", "order_id": str(n)})["summary"]
                for n in range(4)]

    with ThreadPoolExecutor(len(runs)) as pool:
        answers = dict(zip(runs, pool.map(agent, runs), strict=True))
    assert answers == {r: [f"{r}/{n}" for n in range(4)] for r in runs}
    with psycopg.connect(ledger) as conn:
        statuses = conn.execute("SELECT DISTINCT status FROM saga_log").fetchall()
        count = conn.execute("SELECT count(*) FROM saga_log").fetchone()
    assert statuses == [("CONFIRMED",)] and count == (len(runs) * 4,)
