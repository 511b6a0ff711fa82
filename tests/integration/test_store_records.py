"""The records the store hands out hold, field by field, the columns of the same name in
Postgres: a record is built from its row by column name, so a column added to or moved in a
column list cannot shift its neighbours into the wrong fields. And the step an outcome write
returns is the row as now stored, its contract included."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from agentsaga import step_key
from agentsaga.settings import OutcomeCommit
from agentsaga.states import CorrectionState, StepStatus
from agentsaga.store import Correction, SagaLog
from sagatest.outcome_modes import saga_log_for

RUN = "records-run"
CONTRACT = {"tool": "create_ticket", "compensate": "close_ticket"}


@pytest.fixture
def saga_log(pg: str, outcome_commit: OutcomeCommit) -> Iterator[SagaLog]:
    with saga_log_for(pg, outcome_commit).open(migrate=False) as log_:
        yield log_


def stored(dsn: str, table: str) -> dict[str, Any]:
    """The one row of `table` for RUN, every column by name."""
    with psycopg.connect(dsn) as conn, conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(f"SELECT * FROM {table} WHERE run_id = %s", (RUN,)).fetchall()
    assert len(rows) == 1
    return rows[0]


def same_named(record: object, row: dict[str, Any], *, besides: set[str]) -> dict[str, Any]:
    """The fields of `record` that differ from the row's column of the same name (every field
    but `besides` has one)."""
    fields = {f.name for f in dataclasses.fields(record)}  # type: ignore[arg-type]
    assert fields - besides <= row.keys()
    return {name: getattr(record, name) for name in sorted(fields - besides)
            if getattr(record, name) != row[name]}


def written_step(saga_log: SagaLog) -> int:
    """A run with one step, CONFIRMED, under a contract; returns the run's epoch."""
    epoch = saga_log.begin_run(RUN, agent="records", owner="test").run.owner_epoch
    intended = saga_log.record_intent(
        RUN, epoch, 0, tool="create_ticket", tool_class="compensatable",
        key=step_key(RUN, 0, "create_ticket"), args={"summary": "late parcel"},
        compensation={"tool": "close_ticket", "args": {"id": "T-7"}},
        audience=["customer", "support"], contract=CONTRACT, contract_hash="c-1")
    assert intended is not None
    confirmed = saga_log.record_outcome(RUN, epoch, 0, StepStatus.CONFIRMED,
                                        result={"id": "T-7"}, external_ref="T-7",
                                        intended=intended)
    assert confirmed == saga_log.step(RUN, 0)
    return epoch


def test_run_and_step_fields_hold_their_columns(saga_log: SagaLog, pg: str) -> None:
    written_step(saga_log)
    run, step = saga_log.run(RUN), saga_log.step(RUN, 0)
    assert run is not None and step is not None
    assert same_named(run, stored(pg, "saga_runs"), besides={"pivot"}) == {}
    assert same_named(step, stored(pg, "saga_log"), besides=set()) == {}
    assert (step.contract, step.contract_hash, step.external_ref) == (CONTRACT, "c-1", "T-7")


def test_correction_fields_hold_their_columns(saga_log: SagaLog, pg: str) -> None:
    epoch = written_step(saga_log)
    assert saga_log.record_correction(epoch, Correction(
        run_id=RUN, step_idx=0, tool="create_ticket", audience=["customer"], rank=100,
        state=CorrectionState.PROPOSED, correction={"tool": "send_correction"}))
    [correction] = saga_log.corrections(RUN)
    assert same_named(correction, stored(pg, "corrections"), besides=set()) == {}
    assert correction.correction == {"tool": "send_correction"}


def test_the_step_an_outcome_returns_keeps_its_contract(saga_log: SagaLog) -> None:
    """The dispatch path reads back only the columns an outcome changes: the rest, the
    contract the step ran under included, are the intended row's."""
    epoch = saga_log.begin_run(RUN).run.owner_epoch
    intended = saga_log.record_intent(
        RUN, epoch, 0, tool="create_ticket", tool_class="compensatable",
        key=step_key(RUN, 0, "create_ticket"), args={}, compensation=None, audience=[],
        contract=CONTRACT, contract_hash="c-1")
    assert intended is not None
    failed = saga_log.record_outcome(RUN, epoch, 0, StepStatus.NOT_EXECUTED, error="refused",
                                     intended=intended)
    assert failed is not None
    assert (failed.status, failed.error, failed.contract, failed.contract_hash) == (
        StepStatus.NOT_EXECUTED, "refused", CONTRACT, "c-1")
    assert failed == saga_log.step(RUN, 0)
