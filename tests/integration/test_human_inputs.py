"""The operator's one path for what a person patches into an AgentRun (`human_input`), on real
Postgres: the trust check comes first for every kind and records nothing; the core's validation
refuses with its own words (the same as `agentsaga approve` and `agentsaga settle`); what is
recorded is in the saga log, and the status patch shows it. The Kubernetes API is not needed:
`judge` takes the trust check's answer, and each kind's patch is a pure function."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from agentsaga.errors import PivotError
from agentsaga.operator import approval, correction_approval, human_input, settlements
from agentsaga.operator.approval_trust import REASON as UNTRUSTED
from agentsaga.operator.human_input import Recorded, Refused
from agentsaga.operator.status import Obj
from agentsaga.saga.pivot import record_decision
from agentsaga.service.saga_service import SagaService
from agentsaga.settings import Settings
from agentsaga.states import PivotState, RunState, StepStatus
from agentsaga.store import PivotRecord, SagaLog
from agentsaga.store.interfaces import OperatorStore
from sagatest import ledger_tools
from sagatest.ledger_tools import add_fault

NAMESPACE, NAME = "default", "input-run"
LOGGED = f"{NAMESPACE}/{NAME}"
EMAIL = {"to": "customer@example.com", "body": "Your refund is on its way."}
TICKET = {"summary": "s", "order_id": "1"}
NO_POLICY = "no ValidatingAdmissionPolicy binds the name"


@pytest.fixture
def service(pg: str, ledger: str) -> Iterator[SagaService]:
    saga_log = SagaLog(pg, min_size=1, max_size=4).open()
    yield SagaService(saga_log, ledger_tools.build_registry(),
                      Settings(recheck_pause_s=0.01, pod_namespace=NAMESPACE),
                      sleep=lambda _: None)
    saga_log.close()


def agentrun(status: Obj) -> Obj:
    return {"metadata": {"name": NAME, "namespace": NAMESPACE, "generation": 1},
            "status": status}


def staged(service: SagaService) -> PivotRecord:
    service.begin_run(NAME)
    service.dispatch(NAME, "create_ticket", TICKET)
    return service.reach_pivot(NAME, [{"tool": "send_email", "args": EMAIL}])


def awaiting(record: PivotRecord, **approval: Any) -> Obj:
    return agentrun({"pivot": {"state": "AwaitingApproval", "planHash": record.plan_hash},
                     "approval": approval})


def condition(patch: Obj, type_: str) -> Obj:
    return next(c for c in patch["conditions"] if c["type"] == type_)


def test_an_approval_is_recorded_by_the_core_and_shown(
        service: SagaService, operator_log: OperatorStore) -> None:
    record = staged(service)
    given = {"planHash": record.plan_hash, "decision": "Approved", "approver": "alice",
             "reason": "checked"}
    run = awaiting(record, **given)
    outcome = human_input.judge(approval.PIVOT_APPROVAL, operator_log, None, run, "", given)
    assert isinstance(outcome, Recorded)
    logged = service.saga_log.require_run(LOGGED)
    assert logged.pivot is not None and (logged.state, logged.pivot.decided_by) == (
        RunState.COMMITTING, "alice")
    patch = approval.patch(run, "", given, outcome)
    assert patch["approval"] is None and patch["phase"] == "Committing"
    assert patch["pivot"]["decidedBy"] == "alice" and patch["pivot"]["state"] == "Approved"
    assert condition(patch, "PivotApproved")["status"] == "True"
    assert patch["message"] == f"plan {record.plan_hash} approved by alice: checked"


@pytest.mark.parametrize(("given", "reason"), [
    ({"decision": "approved", "approver": "alice"}, "InvalidApproval"),
    ({"decision": "Approved", "approver": ""}, "InvalidApproval"),
    ({"decision": "Approved", "approver": "alice", "planHash": "0" * 64}, "StaleApproval"),
])
def test_a_refused_approval_says_what_agentsaga_approve_says(
        service: SagaService, operator_log: OperatorStore, given: Obj, reason: str) -> None:
    """One validation: the condition's message is the core's refusal, word for word."""
    record = staged(service)
    given = {"planHash": record.plan_hash, **given}
    run = awaiting(record, **given)
    outcome = human_input.judge(approval.PIVOT_APPROVAL, operator_log, None, run, "", given)
    with pytest.raises(PivotError) as core:
        record_decision(operator_log, LOGGED, given["planHash"], given["decision"],
                        given["approver"])
    assert outcome == Refused(reason, str(core.value))
    shown = condition(approval.patch(run, "", given, outcome), "PivotApproved")
    assert (shown["status"], shown["reason"], shown["message"]) == (
        "False", reason, str(core.value))
    assert service.saga_log.require_run(LOGGED).pivot == record  # nothing recorded


def test_an_untrusted_name_is_refused_before_anything_is_validated(
        service: SagaService, operator_log: OperatorStore) -> None:
    """The trust check is first: even a malformed approval is refused as untrusted."""
    record = staged(service)
    given = {"planHash": record.plan_hash, "decision": "whatever", "approver": "mallory"}
    run = awaiting(record, **given)
    outcome = human_input.judge(approval.PIVOT_APPROVAL, operator_log, NO_POLICY, run, "",
                                given)
    assert outcome == Refused(UNTRUSTED, NO_POLICY)
    shown = condition(approval.patch(run, "", given, outcome), "PivotApproved")
    assert shown["reason"] == UNTRUSTED
    assert shown["message"] == f"approval by 'mallory' not recorded: {NO_POLICY}"
    assert service.saga_log.require_run(LOGGED).pivot == record


def test_a_decision_recorded_before_a_crash_is_shown_once_the_same_approval_comes_again(
        service: SagaService, operator_log: OperatorStore) -> None:
    """The log has the decision, the status does not (the operator stopped in between): the
    same approval is taken as recorded. Once the status shows it, the same approval again is
    consumed and the decision stands."""
    record = staged(service)
    given = {"planHash": record.plan_hash, "decision": "Rejected", "approver": "alice"}
    record_decision(operator_log, LOGGED, record.plan_hash, "Rejected", "alice")
    run = awaiting(record, **given)
    outcome = human_input.judge(approval.PIVOT_APPROVAL, operator_log, None, run, "", given)
    assert isinstance(outcome, Recorded) and outcome.value.state == PivotState.REJECTED
    assert condition(approval.patch(run, "", given, outcome), "PivotRejected")["status"] == "True"

    shown = agentrun({"pivot": {"state": "Rejected", "decision": "Rejected",
                                "planHash": record.plan_hash}, "approval": given})
    again = human_input.judge(approval.PIVOT_APPROVAL, operator_log, None, shown, "", given)
    assert isinstance(again, Refused) and again.reason == "StaleApproval"
    patch = approval.patch(shown, "", given, again)
    assert "conditions" not in patch and patch["approval"] is None
    assert patch["message"] == (
        f"run {LOGGED!r} is not awaiting approval (Rejected); it stays Rejected")


def test_a_correction_key_that_is_no_step_is_refused_with_nothing_recorded(
        service: SagaService, operator_log: OperatorStore, pg: str) -> None:
    service.begin_run(NAME)
    given = {"decision": "Approved", "approver": "alice"}
    run = agentrun({"corrections": {"x": {"approval": given}}})
    outcome = human_input.judge(correction_approval.CORRECTION_APPROVAL, operator_log, None,
                                run, "x", given)
    assert outcome == Refused("Refused", "correction key 'x' is not a step number")
    patch = correction_approval.patch(run, "x", given, outcome)
    assert patch["corrections"] == {"x": {"approval": None}}
    assert condition(patch, "CorrectionsDecided")["reason"] == "Refused"
    with psycopg.connect(pg) as conn:
        assert conn.execute("SELECT count(*) FROM corrections WHERE decided_at IS NOT NULL"
                            ).fetchone() == (0,)


def status_of_step_1(service: SagaService) -> StepStatus:
    step = service.saga_log.step(LOGGED, 1)
    assert step is not None
    return step.status


def test_a_settlement_is_checked_for_its_step_key_then_recorded_by_the_core(
        service: SagaService, operator_log: OperatorStore, ledger: str) -> None:
    service.begin_run(NAME)
    operator_log.set_policy(LOGGED, {"irreversibleBeforePivot": "count"})
    service.dispatch(NAME, "create_ticket", TICKET)
    add_fault(ledger, "send_email", "unknown_after_commit")
    assert service.dispatch(NAME, "send_email", EMAIL).outcome == "NEEDS_HUMAN"
    step = service.saga_log.step(LOGGED, 1)
    assert step is not None
    given = {"outcome": "Happened", "settler": "alice", "reason": "delivery report"}
    run = agentrun({"settlements": {"1": given}})
    kind = settlements.STEP_SETTLEMENT

    untrusted = human_input.judge(kind, operator_log, NO_POLICY, run, "1", given)
    assert settlements.patch(run, "1", given, untrusted)["message"] == (
        f"settlement of step 1 by alice refused: not recorded: {NO_POLICY}")
    no_key = human_input.judge(kind, operator_log, None, run, "1", given)
    assert isinstance(no_key, Refused) and "names no stepKey" in no_key.detail
    wrong = {**given, "stepKey": "0" * 32}
    refused = human_input.judge(kind, operator_log, None, run, "1", wrong)
    assert isinstance(refused, Refused) and "0" * 32 in refused.detail
    assert status_of_step_1(service) == StepStatus.UNKNOWN  # nothing recorded

    right = {**given, "stepKey": step.idempotency_key}
    outcome = human_input.judge(kind, operator_log, None, run, "1", right)
    assert isinstance(outcome, Recorded) and outcome.value.recorded
    assert status_of_step_1(service) == StepStatus.CONFIRMED
    patch = settlements.patch(agentrun({"settlements": {"1": right}}), "1", right, outcome)
    assert patch["settlements"]["1"]["state"] == "Recorded"
    assert condition(patch, "StepsSettled")["reason"] == "Recorded"


def test_an_input_for_a_run_the_log_does_not_hold_is_consumed_with_nothing_recorded(
        service: SagaService, operator_log: OperatorStore) -> None:
    """An AgentRun naming no run of its namespace (one of another namespace, say): each kind is
    refused in the core's words, and nothing is written."""
    given = {"planHash": "0" * 64, "decision": "Approved", "approver": "alice"}
    run = agentrun({"approval": given})
    outcome = human_input.judge(approval.PIVOT_APPROVAL, operator_log, None, run, "", given)
    assert isinstance(outcome, Refused) and outcome.reason == "StaleApproval"
    assert f"run {LOGGED!r} has not begun" in outcome.detail
    settled = {"outcome": "NotHappened", "settler": "alice", "reason": "r", "stepKey": "k"}
    refused = human_input.judge(settlements.STEP_SETTLEMENT, operator_log, None,
                                agentrun({"settlements": {"0": settled}}), "0", settled)
    assert isinstance(refused, Refused) and f"run {LOGGED!r} has not begun" in refused.detail
    assert service.saga_log.run(LOGGED) is None
