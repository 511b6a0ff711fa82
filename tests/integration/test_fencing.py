"""R12 on every write and every path: once another writer adopted a run, a write under the old
epoch is refused (`Fenced`) and changes no row; a sidecar's RPCs on a run it no longer owns
are refused the same way and call nothing; the new owner carries on."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from agentsaga import step_key
from agentsaga.errors import Fenced, RunEnded, RunNotFound, SettlementError
from agentsaga.service.saga_service import SagaService
from agentsaga.settings import OutcomeCommit, Settings
from agentsaga.states import (
    CompensationStatus,
    CorrectionState,
    PivotState,
    RunState,
    SettlementOutcome,
    StepStatus,
)
from agentsaga.store import Correction, PivotRecord, SagaLog
from sagatest import ledger_tools
from sagatest.ledger_tools import calls, effects
from sagatest.outcome_modes import saga_log_for

RUN = "fenced-run"


@pytest.fixture
def saga_log(pg: str, outcome_commit: OutcomeCommit) -> Iterator[SagaLog]:
    with saga_log_for(pg, outcome_commit).open(migrate=False) as log_:
        yield log_


def snapshot(dsn: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of the saga log's tables, as they are."""
    with psycopg.connect(dsn) as conn:
        return {table: conn.execute(f"SELECT * FROM {table} ORDER BY 1, 2").fetchall()
                for table in ("saga_runs", "saga_log", "corrections", "saga_attempts",
                              "step_settlements", "saga_observations")}


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
    "outcome of its own call": (StepStatus.INTENDED, lambda log_, epoch: log_.record_outcome(
        RUN, epoch, 0, StepStatus.CONFIRMED, result={"id": "T-1"}, external_ref="T-1",
        intended=log_.step(RUN, 0))),  # the row as its writer wrote it: the dispatch's path
    "compensation": (StepStatus.CONFIRMED, lambda log_, epoch: log_.record_compensation(
        RUN, epoch, 0, CompensationStatus.DONE, comp_key="k", compensated=True)),
    "run state": (StepStatus.CONFIRMED, lambda log_, epoch: log_.set_run_state(
        RUN, epoch, RunState.UNWOUND, end=True)),
    "run update": (StepStatus.CONFIRMED, lambda log_, epoch: log_.update_run(
        RUN, epoch, pivot=PivotRecord(PivotState.AWAITING_APPROVAL, "h"),
        state=RunState.AWAITING_APPROVAL, count_irreversible=True)),
    "correction": (StepStatus.CONFIRMED, lambda log_, epoch: log_.record_correction(
        epoch, Correction(run_id=RUN, step_idx=0, tool="create_ticket", audience=["customer"],
                          rank=100, state=CorrectionState.PROPOSED,
                          correction={"tool": "send_correction"}))),
    "hand to a human": (StepStatus.UNKNOWN, lambda log_, epoch: log_.ask_human(
        RUN, epoch, 0, step_key(RUN, 0, "create_ticket"), "the tool has no lookup")),
    "reopen": (StepStatus.NOT_EXECUTED, lambda log_, epoch: log_.reopen(
        RUN, epoch, 0, external_ref="T-1", result={"id": "T-1"})),
}
"""Every fenced write of the store, with the status its step needs for the write to change a
row. A re-intent also writes the attempt (`saga_attempts`): the snapshot covers it. Not here, by
design: a person's settlement (a human decision, not a writer of the run: it takes no epoch)
and an observation (append-only, never fenced); their own tests follow."""


@pytest.mark.parametrize("write", sorted(STALE_WRITES))
def test_a_stale_writer_is_refused_and_changes_no_row(saga_log: SagaLog, pg: str,
                                                       write: str) -> None:
    status, stale_write = STALE_WRITES[write]
    stale = stale_epoch_with(saga_log, status=status)
    before = snapshot(pg)
    with pytest.raises(Fenced) as refused:
        stale_write(saga_log, stale)
    assert (refused.value.run_id, refused.value.held, refused.value.current) == (
        RUN, stale, stale + 1)
    assert snapshot(pg) == before


@pytest.mark.parametrize("write", sorted(STALE_WRITES))
def test_a_write_to_a_run_the_log_does_not_hold_is_refused_and_changes_no_row(
        saga_log: SagaLog, pg: str, write: str) -> None:
    _, write_to = STALE_WRITES[write]
    before = snapshot(pg)
    with pytest.raises(RunNotFound) as missing:
        write_to(saga_log, 1)
    assert str(missing.value).startswith(f"run {RUN!r} ")
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


ENDED_WRITES: dict[str, tuple[StepStatus, Callable[[SagaLog, int], object]]] = {
    "intent": STALE_WRITES["intent"],
    "re-intent": STALE_WRITES["re-intent"],
    "outcome of a call": (StepStatus.INTENDED, lambda log_, epoch: log_.record_outcome(
        RUN, epoch, 0, StepStatus.CONFIRMED, external_ref="T-1", allow_ended=False)),
}
"""The writes that a run's own owner may no longer make once the run has ended: a new or
repeated call, and the outcome of a call (reconcile and unwind settle ended runs' rows)."""


@pytest.mark.parametrize("write", sorted(ENDED_WRITES))
def test_an_ended_runs_owner_is_refused_a_new_call_and_changes_no_row(
        saga_log: SagaLog, pg: str, write: str) -> None:
    status, late_write = ENDED_WRITES[write]
    stale = stale_epoch_with(saga_log, status=status)
    saga_log.set_run_state(RUN, stale + 1, RunState.SUCCEEDED, end=True)
    before = snapshot(pg)
    with pytest.raises(RunEnded) as refused:
        late_write(saga_log, stale + 1)
    assert str(refused.value) == f"run {RUN!r} has ended (succeeded); no more calls"
    assert snapshot(pg) == before


def test_the_outcome_of_a_call_lands_on_a_run_its_owner_ended_meanwhile(saga_log: SagaLog,
                                                                       pg: str) -> None:
    """What the real system answered is kept (R5): the outcome of a call, under the owner's
    epoch, is written even though the run ended while the call was out (reconcile and unwind
    settle an ended run's rows the same way)."""
    epoch = saga_log.begin_run(RUN).run.owner_epoch
    sent = saga_log.record_intent(RUN, epoch, 0, tool="create_ticket",
                                  tool_class="compensatable",
                                  key=step_key(RUN, 0, "create_ticket"), args={"summary": "a"},
                                  compensation={"tool": "close_ticket", "args": {}},
                                  audience=[])
    assert sent is not None
    saga_log.set_run_state(RUN, epoch, RunState.SUCCEEDED, end=True)
    landed = saga_log.record_outcome(RUN, epoch, 0, StepStatus.CONFIRMED,
                                     result={"id": "T-1"}, external_ref="T-1", intended=sent)
    assert landed is not None and (landed.status, landed.external_ref) == ("CONFIRMED", "T-1")
    assert landed == saga_log.step(RUN, 0)  # the row as written, whole
    with psycopg.connect(pg) as conn:
        assert conn.execute("SELECT status, external_ref, result FROM saga_log").fetchall() == [
            ("CONFIRMED", "T-1", {"id": "T-1"})]


def test_a_compensation_is_recorded_on_its_row_which_is_returned(saga_log: SagaLog) -> None:
    owner = stale_epoch_with(saga_log) + 1
    row = saga_log.record_compensation(RUN, owner, 0, CompensationStatus.INTENDED, comp_key="ck")
    assert row == saga_log.step(RUN, 0)
    assert (row.status, row.comp_status, row.comp_key) == ("CONFIRMED", "INTENDED", "ck")
    with pytest.raises(LookupError) as missing:
        saga_log.record_compensation(RUN, owner, 7, CompensationStatus.INTENDED)
    assert str(missing.value) == f"run {RUN!r} has no step 7"


def test_a_stale_re_intent_writes_no_attempt_and_the_owners_writes_one(saga_log: SagaLog) -> None:
    stale = stale_epoch_with(saga_log, status=StepStatus.NOT_EXECUTED)
    with pytest.raises(Fenced):
        saga_log.re_intend(RUN, stale, 0, args={"summary": "stale"}, compensation=None,
                           audience=[], call_timeout_s=1.0)
    assert saga_log.attempts(RUN) == []
    step = saga_log.re_intend(RUN, stale + 1, 0, args={"summary": "owner"}, compensation=None,
                              audience=[], call_timeout_s=1.0)
    assert step is not None and step.status == StepStatus.INTENDED
    [attempt] = saga_log.attempts(RUN)
    assert (attempt.step_idx, attempt.attempt, attempt.args, attempt.writer_epoch) == (
        0, 2, {"summary": "owner"}, stale + 1)
    assert step.args == {"summary": "0"}  # the row keeps what was first sent


def test_a_stale_writers_observation_is_recorded_and_changes_no_step(saga_log: SagaLog,
                                                                      pg: str) -> None:
    """Observations are append-only and never fenced: what the real system answered a call
    that lost the run is kept (R7), beside the log, which it does not move."""
    stale = stale_epoch_with(saga_log, status=StepStatus.INTENDED)
    step = saga_log.step(RUN, 0)
    assert step is not None
    before = snapshot(pg)
    saga_log.record_observation(step, stale, StepStatus.CONFIRMED, external_ref="T-9",
                                result={"id": "T-9"}, error=None)
    after = snapshot(pg)
    assert {t: after[t] for t in ("saga_runs", "saga_log", "corrections", "saga_attempts")} == (
        {t: before[t] for t in ("saga_runs", "saga_log", "corrections", "saga_attempts")})
    [seen] = saga_log.observations(RUN)
    assert (seen.step_idx, seen.key, seen.outcome, seen.external_ref, seen.writer_epoch) == (
        0, step.idempotency_key, StepStatus.CONFIRMED, "T-9", stale)
    assert saga_log.observed_effects([step.idempotency_key])[step.idempotency_key] == seen


def test_a_persons_settlement_takes_no_epoch_and_is_recorded_once(saga_log: SagaLog,
                                                                   pg: str) -> None:
    """The fencing rule for a settlement: a person is not a writer of the run, so it neither
    holds nor bumps an epoch; it may move only an UNKNOWN row (which no writer is calling), once.
    After the run changed hands it is still recorded, the owner keeps the run, and the stale
    writer can write nothing over it."""
    stale = stale_epoch_with(saga_log, status=StepStatus.UNKNOWN)
    settled = saga_log.settle_step(RUN, 0, SettlementOutcome.HAPPENED, settler="ops@x",
                                   reason="seen in the console", external_ref="T-7")
    assert settled.recorded and settled.step.status == StepStatus.CONFIRMED
    assert settled.step.external_ref == "T-7"
    run = saga_log.run(RUN)
    assert run is not None and run.owner_epoch == stale + 1  # no epoch taken or bumped
    after = snapshot(pg)
    assert len(after["step_settlements"]) == 1
    again = saga_log.settle_step(RUN, 0, SettlementOutcome.HAPPENED, settler="other@x",
                                 reason="again", external_ref="T-7")
    assert not again.recorded and again.settlement.settler == "ops@x"
    with pytest.raises(SettlementError, match="recorded once"):
        saga_log.settle_step(RUN, 0, SettlementOutcome.NOT_HAPPENED, settler="other@x",
                             reason="changed my mind")
    assert snapshot(pg) == after
    with pytest.raises(Fenced):  # the stale writer cannot write its own outcome over it
        saga_log.record_outcome(RUN, stale, 0, StepStatus.NOT_EXECUTED)
    assert snapshot(pg) == after
    saga_log.set_run_state(RUN, stale + 1, RunState.SUCCEEDED, end=True)  # the owner carries on


def test_a_settlement_of_a_step_a_writer_may_still_be_calling_is_refused(saga_log: SagaLog,
                                                                         pg: str) -> None:
    stale_epoch_with(saga_log, status=StepStatus.INTENDED)
    before = snapshot(pg)
    with pytest.raises(SettlementError, match="INTENDED: its call may still be on the wire"):
        saga_log.settle_step(RUN, 0, SettlementOutcome.NOT_HAPPENED, settler="ops@x",
                             reason="not in the console")
    assert snapshot(pg) == before


# -- the sidecar's calls on a run another sidecar adopted ---------------------------------------


@pytest.fixture
def two_sidecars(pg: str, ledger: str,
                 outcome_commit: OutcomeCommit) -> Iterator[tuple[SagaService, SagaService]]:
    logs = [saga_log_for(pg, outcome_commit).open(migrate=False) for _ in range(2)]
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
