"""R12 on every write and every path: once another writer adopted a run, a write under the old
epoch is refused (`Fenced`) and changes no row; a sidecar's RPCs on a run it no longer owns
are refused the same way and call nothing; the new owner carries on."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from agentsaga import step_key
from agentsaga.errors import Fenced, RunNotFound
from agentsaga.service import SagaService
from agentsaga.settings import Settings
from agentsaga.states import CompensationStatus, CorrectionState, PivotState, RunState, StepStatus
from agentsaga.store import Correction, PivotRecord, SagaLog
from sagatest import ledger_tools
from sagatest.ledger_tools import calls, effects

RUN = "fenced-run"


@pytest.fixture
def saga_log(pg: str) -> Iterator[SagaLog]:
    with SagaLog(pg, min_size=1, max_size=4).open(migrate=False) as log_:
        yield log_


def snapshot(dsn: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of the saga log's tables, as they are."""
    with psycopg.connect(dsn) as conn:
        return {table: conn.execute(f"SELECT * FROM {table} ORDER BY 1, 2").fetchall()
                for table in ("saga_runs", "saga_log", "corrections")}


def stale_epoch_with(saga_log: SagaLog, *, steps: int = 1,
                     status: StepStatus = StepStatus.CONFIRMED) -> int:
    """A run with `steps` rows (the newest in `status`) written under epoch 1, then adopted by
    another writer (epoch 2). Returns the stale epoch."""
    run = saga_log.begin_run(RUN).run
    for idx in range(steps):
        saga_log.record_intent(RUN, run.owner_epoch, idx, tool="create_ticket",
                               tool_class="compensatable", key=step_key(RUN, idx, "create_ticket"),
                               args={"summary": str(idx)}, compensation={"tool": "close_ticket",
                                                                         "args": {}},
                               audience=["customer"])
        final = status if idx == steps - 1 else StepStatus.CONFIRMED
        if final != StepStatus.INTENDED:
            saga_log.record_outcome(RUN, run.owner_epoch, idx, final)
    adopted = saga_log.adopt(RUN, "job")
    assert adopted.owner_epoch == run.owner_epoch + 1
    return run.owner_epoch


STALE_WRITES: dict[str, tuple[StepStatus, Callable[[SagaLog, int], object]]] = {
    "intent": (StepStatus.CONFIRMED, lambda log_, epoch: log_.record_intent(
        RUN, epoch, 1, tool="create_ticket", tool_class="compensatable",
        key=step_key(RUN, 1, "create_ticket"), args={}, compensation=None, audience=[])),
    "re-intent": (StepStatus.NOT_EXECUTED, lambda log_, epoch: log_.re_intend(
        RUN, epoch, 0, args={"summary": "again"}, compensation=None, audience=[],
        call_timeout_s=1.0)),
    "outcome": (StepStatus.INTENDED, lambda log_, epoch: log_.record_outcome(
        RUN, epoch, 0, StepStatus.CONFIRMED, result={"id": "T-1"}, external_ref="T-1")),
    "compensation": (StepStatus.CONFIRMED, lambda log_, epoch: log_.record_compensation(
        RUN, epoch, 0, CompensationStatus.DONE, comp_key="k", compensated=True)),
    "run state": (StepStatus.CONFIRMED, lambda log_, epoch: log_.set_run_state(
        RUN, epoch, RunState.UNWOUND, end=True)),
    "run update": (StepStatus.CONFIRMED, lambda log_, epoch: log_.update_run(
        RUN, epoch, pivot=PivotRecord(PivotState.AWAITING_APPROVAL, "h"),
        state=RunState.AWAITING_APPROVAL, count_irreversible=True)),
    "correction": (StepStatus.CONFIRMED, lambda log_, epoch: log_.record_correction(
        epoch, Correction(RUN, 0, "create_ticket", ["customer"], 100,
                          CorrectionState.PROPOSED, {"tool": "send_correction"}))),
}


@pytest.mark.parametrize("write", sorted(STALE_WRITES))
def test_a_stale_writer_is_refused_and_changes_no_row(saga_log: SagaLog, pg: str,
                                                       write: str) -> None:
    status, stale_write = STALE_WRITES[write]
    stale = stale_epoch_with(saga_log, status=status)
    before = snapshot(pg)
    with pytest.raises(Fenced) as refused:
        stale_write(saga_log, stale)
    assert (refused.value.held, refused.value.current) == (stale, stale + 1)
    assert snapshot(pg) == before


@pytest.mark.parametrize("write", sorted(STALE_WRITES))
def test_the_same_write_under_the_current_epoch_changes_rows(saga_log: SagaLog, pg: str,
                                                              write: str) -> None:
    """The refusal above is the epoch's doing: the owner's write goes through."""
    status, owner_write = STALE_WRITES[write]
    stale = stale_epoch_with(saga_log, status=status)
    before = snapshot(pg)
    owner_write(saga_log, stale + 1)
    assert snapshot(pg) != before


# -- the sidecar's calls on a run another sidecar adopted ---------------------------------------


@pytest.fixture
def two_sidecars(pg: str, ledger: str) -> Iterator[tuple[SagaService, SagaService]]:
    logs = [SagaLog(pg, min_size=1, max_size=4).open(migrate=False) for _ in range(2)]
    settings = Settings(recheck_pause_s=0.01)
    yield (SagaService(logs[0], ledger_tools.build_registry(), settings, sleep=lambda _: None),
           SagaService(logs[1], ledger_tools.build_registry(), settings, sleep=lambda _: None))
    for log_ in logs:
        log_.close()


TICKET = {"summary": "Refund for order 1182", "order_id": "1182"}
STALE_CALLS: dict[str, Callable[[SagaService], object]] = {
    "Dispatch": lambda a: a.dispatch(RUN, "create_ticket", TICKET),
    "Reconcile": lambda a: a.reconcile(RUN),
    "Unwind": lambda a: a.unwind(RUN),
    "ReachPivot": lambda a: a.reach_pivot(RUN, [{"tool": "send_email",
                                                 "args": {"to": "c@x", "body": "b"}}]),
    "EndRun": lambda a: a.end_run(RUN, "Failed"),
}


@pytest.mark.parametrize("rpc", sorted(STALE_CALLS))
def test_a_fenced_sidecar_changes_nothing_and_calls_nothing(
        two_sidecars: tuple[SagaService, SagaService], ledger: str, rpc: str) -> None:
    first, second = two_sidecars
    first.begin_run(RUN)
    ledger_tools.add_fault(ledger, "create_ticket", "unknown_after_commit")
    assert first.dispatch(RUN, "create_ticket", TICKET).outcome == "UNKNOWN"
    assert second.begin_run(RUN).adopted  # B adopts the run: A is stale (R12)
    before, calls_before = snapshot(ledger), calls(ledger)
    with pytest.raises(Fenced):
        STALE_CALLS[rpc](first)
    assert snapshot(ledger) == before, "a fenced sidecar wrote to the log"
    assert calls(ledger) == calls_before, "a fenced sidecar called a real system (or looked up)"
    # the new owner carries on: it settles the unknown step by key and runs the next one
    again = second.dispatch(RUN, "create_ticket", TICKET)
    assert again.outcome == "CONFIRMED" and again.key == step_key(RUN, 0, "create_ticket")
    assert len(effects(ledger, "ticket")) == 1
    assert second.dispatch(RUN, "charge_card", {"customer_id": "c", "amount": 5}).outcome == (
        "CONFIRMED")


def test_a_sidecar_that_never_began_the_run_is_told_to_begin_it(
        two_sidecars: tuple[SagaService, SagaService], ledger: str) -> None:
    """Only BeginRun adopts: another RPC never takes a run over by itself."""
    first, second = two_sidecars
    first.begin_run(RUN)
    before = snapshot(ledger)
    for call in STALE_CALLS.values():
        with pytest.raises(RunNotFound, match="BeginRun"):
            call(second)
    assert snapshot(ledger) == before and calls(ledger) == []
