"""The human decision at the pivot (R10) in-process: what is recorded for Approved and for
Rejected, each refusal with the log unchanged, and waiting for the decision."""

from __future__ import annotations

import re

import pytest

from agentsaga.errors import PivotError
from agentsaga.pivot import await_decision, record_decision
from agentsaga.service import SagaService
from agentsaga.settlement import unwind_run
from agentsaga.states import CompensationStatus, CorrectionState, PivotState, RunState
from agentsaga.store import PivotRecord
from sagatest.ledger_tools import effects

RUN = "decision-run"
EMAIL = {"to": "customer@example.com", "body": "Your refund is on its way."}


@pytest.fixture
def service(ledger_service: SagaService) -> SagaService:
    return ledger_service


def staged(service: SagaService) -> PivotRecord:
    service.begin_run(RUN)
    service.dispatch(RUN, "create_ticket", {"summary": "s", "order_id": "1"})
    return service.reach_pivot(RUN, [{"tool": "send_email", "args": EMAIL}])


@pytest.mark.parametrize(("decision", "run_state"), [("Approved", RunState.COMMITTING),
                                                     ("Rejected", RunState.UNWINDING)])
def test_the_decision_is_recorded_with_who_when_and_why(service: SagaService, decision: str,
                                                        run_state: RunState) -> None:
    record = staged(service)
    decided = record_decision(service.saga_log, RUN, record.plan_hash, decision, "alice",
                              "checked the plan")
    assert (decided.state, decided.decision, decided.decided_by, decided.reason) == (
        PivotState(decision), decision, "alice", "checked the plan")
    assert (decided.plan_hash, decided.staged, decided.commit) == (
        record.plan_hash, record.staged, record.commit)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", decided.decided_at)
    run = service.saga_log.require_run(RUN)
    assert (run.pivot, run.state) == (decided, run_state)


@pytest.mark.parametrize(("decision", "approver", "problem"), [
    ("approved", "alice", "decision 'approved': use Approved or Rejected"),
    ("AwaitingApproval", "alice", "use Approved or Rejected"),
    ("Approved", "", "the approval names no approver"),
])
def test_a_malformed_decision_is_refused_and_nothing_recorded(
        service: SagaService, decision: str, approver: str, problem: str) -> None:
    record = staged(service)
    with pytest.raises(PivotError, match=re.escape(problem)):
        record_decision(service.saga_log, RUN, record.plan_hash, decision, approver)
    run = service.saga_log.require_run(RUN)
    assert (run.pivot, run.state) == (record, RunState.AWAITING_APPROVAL)


def test_a_stale_hash_is_refused_and_nothing_recorded(service: SagaService) -> None:
    record = staged(service)
    with pytest.raises(PivotError, match=re.escape(
            f"stale approval: plan hash 'abc' is not the staged plan {record.plan_hash!r}")):
        record_decision(service.saga_log, RUN, "abc", "Approved", "alice")
    assert service.saga_log.require_run(RUN).pivot == record


def test_no_decision_without_a_staged_plan_and_none_twice(service: SagaService) -> None:
    service.begin_run(RUN)
    with pytest.raises(PivotError, match=re.escape(
            f"run {RUN!r} is not awaiting approval (no staged plan)")):
        record_decision(service.saga_log, RUN, "abc", "Approved", "alice")
    record = service.reach_pivot(RUN, [{"tool": "send_email", "args": EMAIL}])
    first = record_decision(service.saga_log, RUN, record.plan_hash, "Rejected", "bob", "no")
    with pytest.raises(PivotError, match=re.escape(
            f"run {RUN!r} is not awaiting approval (Rejected)")):
        record_decision(service.saga_log, RUN, record.plan_hash, "Approved", "alice")
    assert service.saga_log.require_run(RUN).pivot == first


def test_waiting_for_the_decision(service: SagaService) -> None:
    service.begin_run(RUN)
    assert await_decision(service.saga_log, RUN, timeout=0.0) is None  # nothing staged
    record = service.reach_pivot(RUN, [{"tool": "send_email", "args": EMAIL}])
    undecided = await_decision(service.saga_log, RUN, timeout=0.0, poll=0.0)
    assert undecided == record and not undecided.decided  # the timeout passed: as it is
    decided = record_decision(service.saga_log, RUN, record.plan_hash, "Approved", "alice")
    assert await_decision(service.saga_log, RUN, timeout=60.0) == decided  # no wait for it


def test_an_approved_irreversible_step_is_queued_for_a_person_on_unwind_once(
        service: SagaService, ledger: str) -> None:
    """R9 after R10: what the customer read cannot be compensated; the unwind queues its
    pre-written correction (Proposed, for the customer) and marks the step QUEUED, once."""
    record = staged(service)
    record_decision(service.saga_log, RUN, record.plan_hash, "Approved", "alice")
    sent = service.dispatch(RUN, "send_email", EMAIL)
    assert sent.outcome == "CONFIRMED"
    first = unwind_run(service.saga_log, service.registry, RUN, "job", recheck_pause_s=0.01)
    queued = {"step_idx": 1, "tool": "send_email", "state": "Proposed",
              "audience": ["customer"]}
    assert first.queued == [queued]
    step = service.saga_log.step(RUN, 1)
    assert step is not None and step.comp_status == CompensationStatus.QUEUED
    [correction] = [c for c in service.saga_log.corrections(RUN) if c.step_idx == 1]
    assert (correction.state, correction.audience, correction.tool) == (
        CorrectionState.PROPOSED, ["customer"], "send_email")
    again = unwind_run(service.saga_log, service.registry, RUN, "job2", recheck_pause_s=0.01)
    assert again.queued == [queued]
    assert [c for c in service.saga_log.corrections(RUN) if c.step_idx == 1] == [correction]
    assert len(effects(ledger, "email")) == 1  # nothing sent again, nothing "undone"
