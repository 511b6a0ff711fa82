"""Dispatch on a real Postgres: intent first, run-derived keys, three outcomes, reconcile first."""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
from collections.abc import Callable, Iterator
from datetime import date
from pathlib import Path
from typing import Any, Literal

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from agentsaga import NO_LOOKUP, Compensation, OutcomeUnknown, Registry, Rejected, ref, step_key
from agentsaga.calls import DispatchResult
from agentsaga.errors import (
    CompensationUnavailable,
    Fenced,
    InvalidArguments,
    LogUnavailable,
    PivotError,
    RunEnded,
    RunUnsettled,
)
from agentsaga.saga.dispatch import UNKNOWN_MESSAGE
from agentsaga.saga.human_settlement import settle
from agentsaga.service.saga_service import SagaService
from agentsaga.settings import OutcomeCommit, Settings
from agentsaga.states import DispatchOutcome, RunState, SettlementOutcome, StepStatus
from agentsaga.store import NoHooks, SagaLog, Step
from agentsaga.store.interfaces import OperatorStore
from sagatest import ledger_tools
from sagatest.cli_tools import imported_package_python
from sagatest.ledger_tools import add_fault, calls, effects
from sagatest.outcome_modes import saga_log_for
from sagatest.planted_secrets import leaks, planted_text
from sagatest.traced import Traced


@pytest.fixture
def dispatcher(pg: str, ledger: str, outcome_commit: OutcomeCommit) -> Iterator[SagaService]:
    pauses: list[float] = []
    saga_log = saga_log_for(pg, outcome_commit).open()
    d = SagaService(saga_log, ledger_tools.build_registry(), Settings(recheck_pause_s=0.01),
                   sleep=pauses.append)
    d.pauses = pauses  # type: ignore[attr-defined]
    yield d
    saga_log.close()


def rows(dsn: str) -> list[tuple[int, str, str, str]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            "SELECT step_idx, tool, status, idempotency_key FROM saga_log ORDER BY step_idx"
        ).fetchall()


def test_confirmed_call_writes_one_row_with_the_run_derived_key(dispatcher: SagaService,
                                                                ledger: str) -> None:
    dispatcher.begin_run("refund-1182")
    out = dispatcher.dispatch("refund-1182", "create_ticket",
                              {"summary": "Refund for order 1182", "order_id": "1182"})
    assert (out.outcome, out.status, out.message) == ("CONFIRMED", "CONFIRMED", "")
    assert out.key == step_key("refund-1182", 0, "create_ticket")
    assert rows(ledger) == [(0, "create_ticket", "CONFIRMED", out.key)]
    assert [e["key"] for e in effects(ledger, "ticket")] == [out.key]
    assert out.external_ref == out.result["id"]
    assert dispatcher.saga_log.step_by_key(out.key) == dispatcher.saga_log.step("refund-1182", 0)
    assert dispatcher.saga_log.step_by_key(step_key("refund-1182", 1, "create_ticket")) is None
    assert dispatcher.saga_log.step("refund-1182", 1) is None


@pytest.mark.parametrize(("args", "compensation"), [
    ({"summary": "Refund", "order_id": "1182"}, None),
    # what JSON changes: tuples become lists, keys strings, other values their text
    ({"items": (1, (2, 3)), 7: "seven", "when": date(2026, 1, 2), "n": 1.5, "none": None},
     {"tool": "close_ticket", "args": {"ids": ("a", "b")}}),
    # what the log masks (`agentsaga.redact`)
    ({"summary": planted_text()}, {"tool": "close_ticket", "args": {"note": planted_text()}}),
])
def test_the_intended_step_the_log_answers_is_the_row_it_holds(
        dispatcher: SagaService, args: dict[Any, Any],
        compensation: dict[str, Any] | None) -> None:
    """R2: the INTENDED row's step is built from what was sent (only the row's times are read
    back), and is exactly what reading the row gives."""
    saga_log = dispatcher.saga_log
    run = saga_log.begin_run("held").run
    written = saga_log.record_intent(
        "held", run.owner_epoch, 0, tool="create_ticket", tool_class="compensatable",
        key=step_key("held", 0, "create_ticket"), args=args, compensation=compensation,
        audience=["ops@example.com", 'quote " and \\ slash'], after_pivot=True, commit_index=2)
    assert written is not None and written == saga_log.step("held", 0)
    assert leaks(repr(written)) == []


def test_reworded_retry_of_unknown_step_reuses_key_and_finds_the_effect(
        dispatcher: SagaService, ledger: str) -> None:
    dispatcher.begin_run("r1")
    add_fault(ledger, "create_ticket", "unknown_after_commit")
    first = dispatcher.dispatch("r1", "create_ticket",
                                {"summary": "Refund for order 1182", "order_id": "1182"})
    assert first.outcome == "UNKNOWN"
    assert "do not retry with new arguments" in first.message.lower()
    retry = dispatcher.dispatch("r1", "create_ticket",
                                {"summary": "Order #1182 refund", "order_id": "1182"})
    assert (retry.outcome, retry.status) == ("CONFIRMED", "CONFIRMED")
    assert retry.message == "already happened: found by its idempotency key"
    assert retry.key == first.key and retry.step_idx == first.step_idx == 0
    tickets = effects(ledger, "ticket")
    assert len(tickets) == 1
    assert retry.result["summary"] == "Refund for order 1182"  # the real effect, not the wording
    assert len(calls(ledger, "create_ticket")) == 2  # one call, one lookup: no second create
    assert rows(ledger) == [(0, "create_ticket", "CONFIRMED", first.key)]


def test_lookup_found_on_recheck_settles_confirmed(dispatcher: SagaService, ledger: str) -> None:
    dispatcher.begin_run("r2")
    add_fault(ledger, "create_ticket", "unknown_after_commit")
    dispatcher.dispatch("r2", "create_ticket", {"summary": "a", "order_id": "1"})
    add_fault(ledger, "create_ticket", "hide_lookups", times=1)
    out = dispatcher.dispatch("r2", "create_ticket", {"summary": "b", "order_id": "1"})
    assert out.outcome == "CONFIRMED"
    assert dispatcher.pauses == [0.01]  # type: ignore[attr-defined]
    assert len(effects(ledger, "ticket")) == 1


def test_lookup_never_finding_settles_not_executed_and_runs_once_under_same_key(
        dispatcher: SagaService, ledger: str, pg: str) -> None:
    dispatcher.begin_run("r3")
    add_fault(ledger, "charge_card", "reject")
    add_fault(ledger, "charge_card", "unknown_after_commit")
    first = dispatcher.dispatch("r3", "charge_card", {"customer_id": "c", "amount": 500})
    assert first.outcome == "FAILED"
    rejected = dispatcher.saga_log.step("r3", 0)  # why, in the row
    assert rejected is not None and rejected.error == "charge_card: rejected by the ledger"
    second = dispatcher.dispatch("r3", "charge_card", {"customer_id": "c", "amount": 500})
    assert second.outcome == "UNKNOWN" and second.step_idx == 1
    with psycopg.connect(pg, autocommit=True) as conn:  # the effect vanished (never happened)
        conn.execute("DELETE FROM ledger")
    third = dispatcher.dispatch("r3", "charge_card", {"customer_id": "c", "amount": 500})
    assert third.outcome == "CONFIRMED"
    retried = dispatcher.saga_log.step("r3", 1)  # the attempt's compensation, on the row (R6)
    assert retried is not None and retried.compensation == Compensation(
        "refund", {"charge_key": third.key, "amount": 500}).to_json()
    assert third.key == second.key and third.step_idx == 1
    assert [e["key"] for e in effects(ledger, "charge")] == [second.key]
    assert [r[2] for r in rows(ledger)] == ["FAILED", "CONFIRMED"]


@pytest.mark.allow_effect_warnings("the lookup it provokes fails")
def test_failed_lookup_leaves_step_unknown(dispatcher: SagaService, ledger: str) -> None:
    dispatcher.begin_run("r4")
    add_fault(ledger, "create_ticket", "unknown_after_commit")
    dispatcher.dispatch("r4", "create_ticket", {"summary": "a", "order_id": "1"})
    add_fault(ledger, "create_ticket", "fail_lookups")
    out = dispatcher.dispatch("r4", "create_ticket", {"summary": "a", "order_id": "1"})
    assert (out.outcome, out.status) == ("UNKNOWN", "UNKNOWN")  # the answer names the row's
    assert [r[2] for r in rows(ledger)] == ["UNKNOWN"]
    assert len(effects(ledger, "ticket")) == 1
    why = "lookup failed: OutcomeUnknown: create_ticket: lookup failed (503)"
    step = dispatcher.saga_log.step("r4", 0)
    assert step is not None and step.error == why  # the row says why it is still UNKNOWN


def test_different_tool_while_unknown_is_step_unresolved_and_not_called(
        dispatcher: SagaService, ledger: str) -> None:
    dispatcher.begin_run("r5")
    add_fault(ledger, "create_ticket", "unknown_after_commit")
    dispatcher.dispatch("r5", "create_ticket", {"summary": "a", "order_id": "1"})
    out = dispatcher.dispatch("r5", "charge_card", {"customer_id": "c", "amount": 500})
    assert out == DispatchResult(
        DispatchOutcome.STEP_UNRESOLVED, 0, step_key("r5", 0, "create_ticket"), status="UNKNOWN",
        message="step 0 (create_ticket) has an unknown outcome; call create_ticket again to "
                "resolve it before anything else")
    assert calls(ledger, "charge_card") == []
    assert [r[1] for r in rows(ledger)] == ["create_ticket"]


def test_pure_tools_write_no_rows(dispatcher: SagaService, ledger: str) -> None:
    dispatcher.begin_run("r6")
    out = dispatcher.dispatch("r6", "search_orders", {"order_id": "1182"})
    assert out.outcome == "CONFIRMED" and out.result["order_id"] == "1182"
    assert out.step_idx == -1
    assert rows(ledger) == []


def test_confirmed_step_is_never_called_again_new_call_is_next_step(
        dispatcher: SagaService, ledger: str) -> None:
    dispatcher.begin_run("r7")
    a = dispatcher.dispatch("r7", "create_ticket", {"summary": "a", "order_id": "1"})
    b = dispatcher.dispatch("r7", "create_ticket", {"summary": "a", "order_id": "1"})
    assert (a.step_idx, b.step_idx) == (0, 1) and a.key != b.key
    assert len(calls(ledger, "create_ticket")) == 2


def test_irreversible_tool_needs_approval_and_is_not_called(dispatcher: SagaService,
                                                             ledger: str) -> None:
    dispatcher.begin_run("r8")
    out = dispatcher.dispatch("r8", "send_email", {"to": "c@example.com", "body": "hi"})
    assert out == DispatchResult(
        DispatchOutcome.NEEDS_APPROVAL, 0, step_key("r8", 0, "send_email"),
        message="send_email is irreversible: it needs human approval at the pivot before it "
                "runs (R6, R10)")
    assert calls(ledger, "send_email") == [] and rows(ledger) == []


def test_a_commit_step_called_before_the_pivot_is_refused_and_not_called(
        dispatcher: SagaService, ledger: str) -> None:
    """R10: a commit step runs only as a step of an approved plan."""
    dispatcher.begin_run("r-commit")
    out = dispatcher.dispatch("r-commit", "capture_charge", {"charge_ref": "CHARGE-1"})
    assert out == DispatchResult(
        DispatchOutcome.NEEDS_APPROVAL, 0, step_key("r-commit", 0, "capture_charge"),
        message="capture_charge is a commit step: stage it in the plan and call it after the "
                "pivot is approved")
    assert calls(ledger, "capture_charge") == [] and rows(ledger) == []


def test_mistyped_arguments_refuse_the_call_before_anything_is_written(
        dispatcher: SagaService, ledger: str) -> None:
    dispatcher.begin_run("r9")
    with pytest.raises(InvalidArguments, match="argument 'amount' must be an integer"):
        dispatcher.dispatch("r9", "charge_card", {"customer_id": "c", "amount": "lots"})
    with pytest.raises(InvalidArguments, match="argument 'receipt' must be true or false"):
        dispatcher.dispatch("r9", "charge_card", {"customer_id": "c", "amount": 5,
                                                  "receipt": "yes"})
    assert calls(ledger) == [] and rows(ledger) == []


def test_wrong_arguments_are_refused_before_anything_is_written(dispatcher: SagaService,
                                                                 ledger: str) -> None:
    dispatcher.begin_run("r10")
    with pytest.raises(InvalidArguments, match="argument 'colour' is not an argument of this tool"):
        dispatcher.dispatch("r10", "create_ticket", {"summary": "a", "order_id": "1",
                                                     "colour": "red"})
    with pytest.raises(InvalidArguments, match="set by the harness"):
        dispatcher.dispatch("r10", "create_ticket", {"summary": "a", "order_id": "1",
                                                     "idempotency_key": "mine"})
    assert rows(ledger) == [] and calls(ledger) == []


def test_ended_run_refuses_calls(dispatcher: SagaService, ledger: str) -> None:
    dispatcher.begin_run("r11")
    dispatcher.end_run("r11")
    with pytest.raises(RunEnded):
        dispatcher.dispatch("r11", "create_ticket", {"summary": "a", "order_id": "1"})
    assert rows(ledger) == []


@pytest.mark.allow_effect_warnings("the outcome write it provokes fails")
def test_outcome_lost_with_the_database_connection_is_unknown_then_reconciled(
        dispatcher: SagaService, ledger: str, caplog: pytest.LogCaptureFixture) -> None:
    dispatcher.begin_run("r12")
    add_fault(ledger, "create_ticket", "cut_db_after_commit")
    with caplog.at_level(logging.WARNING, logger="agentsaga.saga.dispatch"):
        first = dispatcher.dispatch("r12", "create_ticket", {"summary": "a", "order_id": "1"})
    assert first == DispatchResult(
        DispatchOutcome.UNKNOWN, 0, step_key("r12", 0, "create_ticket"), status="INTENDED",
        message=UNKNOWN_MESSAGE + " (the call returned, but the saga log could not record its "
                                  "outcome; it is settled by its key on the next call)")
    [record] = [r for r in caplog.records if r.name == "agentsaga.saga.dispatch"]
    warning = record.getMessage()
    said = re.fullmatch(
        r"create_ticket ran and came back CONFIRMED, but the saga log's Postgres at (\S+) could "
        r"not record the outcome \((.+)\); the step stays INTENDED and is settled by its key on "
        r"the next call or reconcile", warning)
    assert said is not None, warning
    where, reason = said.groups()
    assert conninfo_to_dict(ledger)["dbname"] in where and "terminat" in reason, warning
    assert (record.run_id, record.step, record.tool, record.key) == (  # type: ignore[attr-defined]
        "r12", 0, "create_ticket", first.key)
    assert "nothing was called" not in warning  # the tool did run: its effect is in the ledger
    assert rows(ledger) == [(0, "create_ticket", "INTENDED", first.key)]
    again = None
    for _ in range(5):  # the pool hands out its terminated connections once each
        try:
            again = dispatcher.dispatch("r12", "create_ticket", {"summary": "b", "order_id": "1"})
            break
        except LogUnavailable:  # the store's own error, never a psycopg one
            continue
    assert again is not None and again.outcome == "CONFIRMED" and again.key == first.key
    assert len(effects(ledger, "ticket")) == 1
    assert rows(ledger) == [(0, "create_ticket", "CONFIRMED", first.key)]


def test_step_settled_not_executed_by_a_job_runs_again_under_its_own_key(
        dispatcher: SagaService, ledger: str, pg: str) -> None:
    from agentsaga.saga.resolution import reconcile_run

    dispatcher.begin_run("r13")
    add_fault(ledger, "charge_card", "unknown_after_commit")
    first = dispatcher.dispatch("r13", "charge_card", {"customer_id": "c", "amount": 500})
    with psycopg.connect(pg, autocommit=True) as conn:  # the charge never really happened
        conn.execute("DELETE FROM ledger")
    report = reconcile_run(dispatcher.saga_log, dispatcher.registry, "r13", recheck_pause_s=0.01)
    assert [r["now"] for r in report.reconciled] == ["NOT_EXECUTED"]
    dispatcher.begin_run("r13")  # the agent's sidecar adopts the run back from the job
    again = dispatcher.dispatch("r13", "charge_card", {"customer_id": "c", "amount": 500})
    assert again.outcome == "CONFIRMED"
    assert (again.step_idx, again.key) == (first.step_idx, first.key)
    assert [e["key"] for e in effects(ledger, "charge")] == [first.key]


def test_no_new_step_while_the_log_holds_an_unsettled_one(dispatcher: SagaService,
                                                          ledger: str, pg: str) -> None:
    """R3 holds in the INTENDED insert itself, whatever this process remembers."""
    dispatcher.begin_run("r14")
    done = dispatcher.dispatch("r14", "create_ticket", {"summary": "a", "order_id": "1"})
    with psycopg.connect(pg, autocommit=True) as conn:  # an outcome lost to a Postgres crash
        conn.execute("UPDATE saga_log SET status = 'INTENDED' WHERE idempotency_key = %s",
                     (done.key,))
    refused = dispatcher.dispatch("r14", "charge_card", {"customer_id": "c", "amount": 5})
    assert refused.outcome == "STEP_UNRESOLVED" and calls(ledger, "charge_card") == []
    again = dispatcher.dispatch("r14", "charge_card", {"customer_id": "c", "amount": 5})
    assert again.outcome == "STEP_UNRESOLVED" and "create_ticket" in again.message
    assert [r[2] for r in rows(ledger)] == ["INTENDED"]


def test_a_lost_answer_of_a_tool_without_lookup_is_handed_to_a_person(
        dispatcher: SagaService, ledger: str, operator_log: OperatorStore) -> None:
    """NEEDS_HUMAN, in full: what the agent is told, the step left UNKNOWN, and the hand-over
    recorded with why (the command a person runs)."""
    dispatcher.begin_run("r14")
    operator_log.set_policy("r14", {"irreversibleBeforePivot": "count"})
    dispatcher.dispatch("r14", "create_ticket", {"summary": "a", "order_id": "1"})
    add_fault(ledger, "send_email", "unknown_after_commit")
    out = dispatcher.dispatch("r14", "send_email", {"to": "c@example.com", "body": "b"})
    command = ("agentsaga settle --run r14 --step 1 (--happened [--ref ID] | --not-happened)"
               " --reason TEXT")
    assert (out.outcome, out.step_idx, out.key, out.status) == (
        "NEEDS_HUMAN", 1, step_key("r14", 1, "send_email"), "UNKNOWN")
    assert out.message == (
        "step 1 (send_email): only a person can settle this step: its outcome is unknown and "
        "the tool has no lookup. Do not call send_email again and do not work around it with "
        "other tools; tell the user what you were doing and end your turn. A person records "
        f"what happened with `{command}`.")
    [waiting] = dispatcher.saga_log.settlements("r14", waiting_only=True)
    assert (waiting.step_idx, waiting.step_key, waiting.state) == (1, out.key, "Waiting")
    assert waiting.why == ("tool 'send_email' declares no lookup: only a person can tell "
                           f"whether step 1 happened; record it with `{command}`")
    assert rows(ledger)[1] == (1, "send_email", "UNKNOWN", out.key)
    assert len(calls(ledger, "send_email")) == 1
    other = dispatcher.dispatch("r14", "create_ticket", {"summary": "b", "order_id": "2"})
    assert (other.outcome, other.step_idx, other.message) == ("NEEDS_HUMAN", 1, out.message)
    same = dispatcher.dispatch("r14", "send_email", {"to": "c@example.com", "body": "b"})
    assert (same.outcome, same.step_idx, same.key, same.message) == (
        "NEEDS_HUMAN", 1, out.key, out.message)
    assert len(calls(ledger, "send_email")) == 1  # asked nobody again: only a person can tell
    assert len(rows(ledger)) == 2 and len(calls(ledger, "create_ticket")) == 1


def test_a_pure_tool_is_called_with_no_row_and_its_answer_or_failure_returned(
        pg: str, ledger: str) -> None:
    """R2 for a pure tool: no intent, no key; what it returned (an id becomes the ref), and a
    refusal or any error as FAILED with what went wrong."""
    from agentsaga.calls import DispatchResult
    from agentsaga.errors import Rejected
    from agentsaga.saga.registry import Effect, Registry
    from agentsaga.states import DispatchOutcome

    registry = Registry()

    @registry.tool(cls="pure")
    def find_order(order_id: str) -> dict[str, str]:
        return {"id": f"O-{order_id}", "status": "delivered"}

    @registry.tool(cls="pure")
    def find_note(order_id: str) -> Effect:
        return Effect(ref=None, result={"note": order_id})

    @registry.tool(cls="pure")
    def find_nothing(order_id: str) -> None:
        return None

    @registry.tool(cls="pure")
    def refuse(order_id: str) -> None:
        raise Rejected(f"no order {order_id}")

    @registry.tool(cls="pure")
    def crash(order_id: str) -> None:
        raise ValueError(f"bad order {order_id}")

    with SagaLog(pg, min_size=1, max_size=2).open() as saga_log:
        service = SagaService(saga_log, registry, Settings(recheck_pause_s=0.01))
        service.begin_run("r15")
        args = {"order_id": "7"}
        assert service.dispatch("r15", "find_order", args) == DispatchResult(
            DispatchOutcome.CONFIRMED, result={"id": "O-7", "status": "delivered"},
            external_ref="O-7")
        assert service.dispatch("r15", "find_note", args) == DispatchResult(
            DispatchOutcome.CONFIRMED, result={"note": "7"}, external_ref=None)
        assert service.dispatch("r15", "find_nothing", args) == DispatchResult(
            DispatchOutcome.CONFIRMED)
        assert service.dispatch("r15", "refuse", args) == DispatchResult(
            DispatchOutcome.FAILED, message="no order 7")
        assert service.dispatch("r15", "crash", args) == DispatchResult(
            DispatchOutcome.FAILED, message="ValueError: bad order 7")
    assert rows(ledger) == []


@pytest.mark.parametrize(("policy", "counted"), [
    ({"irreversibleBeforePivot": "count"}, True),
    ({"irreversibleBeforePivot": "refuse"}, False),
    ({"irreversibleBeforePivot": "Count"}, False),  # not a policy: the safe one
    ({}, False),
])
def test_the_runs_own_policy_decides_an_irreversible_call_before_the_pivot(
        dispatcher: SagaService, ledger: str, traced: Traced, policy: dict[str, object],
        counted: bool, operator_log: OperatorStore) -> None:
    """R10: `irreversibleBeforePivot: count` (the AgentRun's spec, copied into the log by the
    operator) runs the call and counts it, shown to the approver and on the tool's counter;
    anything else refuses it."""
    dispatcher.begin_run("policy")
    assert operator_log.set_policy("policy", policy)
    out = dispatcher.dispatch("policy", "send_email", {"to": "c@example.com", "body": "hi"})
    sent = len(effects(ledger, "email"))
    if counted:
        assert (out.outcome, sent) == ("CONFIRMED", 1)
        assert [r[1:3] for r in rows(ledger)] == [("send_email", "CONFIRMED")]
    else:
        assert (out.outcome, sent, rows(ledger)) == ("NEEDS_APPROVAL", 0, [])
    assert dispatcher.saga_log.require_run("policy").irreversible_before_pivot == int(counted)
    by_tool = {k: v for k, v in traced.counted("agentsaga.irreversible_before_pivot").items() if v}
    assert by_tool == ({(("agentsaga.tool", "send_email"),): 1} if counted else {})
    record = dispatcher.reach_pivot("policy", [{"tool": "send_email", "args": {
        "to": "c@example.com", "body": "done"}}])
    assert record.irreversible_before_pivot == int(counted)


@pytest.mark.parametrize(("default", "policy", "counted"), [
    ("refuse", "count", True),
    ("count", "refuse", False),
])
def test_a_policy_copied_in_after_the_runs_first_call_decides_the_next_one(
        pg: str, ledger: str, operator_log: OperatorStore, default: Literal["refuse", "count"],
        policy: str, counted: bool) -> None:
    """The sidecar keeps what it wrote last (its cursor) between calls, but the AgentRun's
    policy reaches the log whenever the operator copies it: an irreversible call before the
    pivot is admitted by the policy as it is now, in both directions."""
    with SagaLog(pg, min_size=1, max_size=2).open() as saga_log:
        service = SagaService(saga_log, ledger_tools.build_registry(),
                              Settings(irreversible_before_pivot=default))
        service.begin_run("late-policy")
        first = service.dispatch("late-policy", "create_ticket",
                                 {"summary": "a", "order_id": "1"})
        assert first.outcome == "CONFIRMED"
        assert operator_log.set_policy("late-policy", {"irreversibleBeforePivot": policy})
        out = service.dispatch("late-policy", "send_email", {"to": "c@example.com", "body": "b"})
    assert (out.outcome, len(effects(ledger, "email"))) == (
        ("CONFIRMED", 1) if counted else ("NEEDS_APPROVAL", 0))


@pytest.mark.parametrize(("policy", "required"), [
    ({"pivot": {"required": True}}, True),
    ({"pivot": {"required": False}}, False),
    ({"pivot": {}}, False),
    ({"pivot": None}, False),
    ({"irreversibleBeforePivot": "count"}, False),
])
def test_a_run_whose_spec_requires_a_pivot_cannot_succeed_without_one(
        dispatcher: SagaService, policy: dict[str, object], required: bool,
        operator_log: OperatorStore) -> None:
    dispatcher.begin_run("must-pivot")
    assert operator_log.set_policy("must-pivot", policy)
    if required:
        with pytest.raises(PivotError, match="requires a pivot \\(spec.pivot.required\\)"):
            dispatcher.end_run("must-pivot", "Succeeded")
        assert dispatcher.saga_log.require_run("must-pivot").state == RunState.RUNNING
    else:
        assert dispatcher.end_run("must-pivot", "Succeeded").state == RunState.SUCCEEDED


def test_an_empty_lookup_before_the_effect_could_be_visible_proves_nothing(
        pg: str, ledger: str) -> None:
    """R7 with a time contract: the lost call's effect could take an hour to become visible and
    the system dedupes re-sent keys for a day. Both lookups come back empty: the row stays
    UNKNOWN, saying until when (by the database's clock) and why; nothing is sent again."""
    registry = ledger_tools.build_registry()
    registry.override_timing({"create_ticket": {"visible_within_s": 3600.0,
                                                "dedupes_for_s": 86400.0}})
    with SagaLog(pg, min_size=1, max_size=2).open() as saga_log:
        service = SagaService(saga_log, registry, Settings(recheck_pause_s=0.01),
                              sleep=lambda _: None)
        service.begin_run("lagging")
        add_fault(ledger, "create_ticket", "unknown_after_commit")
        service.dispatch("lagging", "create_ticket", {"summary": "a", "order_id": "1"})
        add_fault(ledger, "create_ticket", "hide_lookups", times=2)
        [step] = saga_log.steps("lagging")
        found = service.reconciler.settle(step, service.epoch("lagging"))
        [after] = saga_log.steps("lagging")
    with psycopg.connect(pg) as conn:
        row = conn.execute("SELECT deadline + interval '3600 seconds' FROM saga_log"
                           " WHERE run_id = 'lagging'").fetchone()
    assert row is not None
    certain_at = row[0]
    detail = (f"not found by key yet; its absence is certain at "
              f"{certain_at:%Y-%m-%d %H:%M:%S} UTC (in {found.retry_after_s:.1f}s): the call's "
              "deadline plus the time its effect takes to become visible")
    assert (found.finding, found.detail, found.was, found.certain_at) == (
        "not_yet_certain", detail, "UNKNOWN", certain_at)
    assert found.retry_after_s is not None
    assert 0.0 < found.retry_after_s <= (certain_at - step.created_at).total_seconds()
    assert found.step == after and (after.status, after.error) == ("UNKNOWN", detail)
    assert len(calls(ledger, "create_ticket")) == 1 + 2  # the call, then two lookups


def test_within_the_deduplication_window_only_the_same_arguments_are_sent_again(
        pg: str, ledger: str, traced: Traced) -> None:
    """R7 with a time contract: the lost call's effect may not be visible yet, but the system
    answers a re-sent key with its first answer for a day. Called again reworded: UNKNOWN,
    nothing sent. Called again with what was sent: sent again under the same key (harmless)."""
    registry = ledger_tools.build_registry()
    registry.override_timing({"create_ticket": {"visible_within_s": 3600.0,
                                                "dedupes_for_s": 86400.0}})
    sent = {"summary": "a", "order_id": "1"}
    with SagaLog(pg, min_size=1, max_size=2).open() as saga_log:
        service = SagaService(saga_log, registry, Settings(recheck_pause_s=0.01),
                              sleep=lambda _: None)
        service.begin_run("dedupes")
        add_fault(ledger, "create_ticket", "unknown_after_commit")
        first = service.dispatch("dedupes", "create_ticket", sent)
        add_fault(ledger, "create_ticket", "hide_lookups", times=4)
        reworded = service.dispatch("dedupes", "create_ticket", {**sent, "summary": "b"})
        assert (reworded.outcome, reworded.key) == ("UNKNOWN", first.key)
        assert reworded.retry_after_s is not None
        [row] = saga_log.steps("dedupes")
        assert reworded.status == row.status == "UNKNOWN"
        assert reworded.message == (
            f"{UNKNOWN_MESSAGE} ({row.error}) Call the same tool again in "
            f"{reworded.retry_after_s:.1f}s or later: by then the harness can be certain.")
        assert first.retry_after_s is not None and first.message == (
            f"{UNKNOWN_MESSAGE} (OutcomeUnknown: create_ticket: 504 Gateway Timeout (after the "
            f"effect was committed)) Call the same tool again in {first.retry_after_s:.1f}s or "
            "later: by then the harness can be certain.")
        assert [c["what"] for c in calls(ledger, "create_ticket")] == [
            "call", "lookup", "lookup"]
        again = service.dispatch("dedupes", "create_ticket", sent)
    assert (again.outcome, again.step_idx, again.key) == ("CONFIRMED", 0, first.key)
    assert [(c["what"], c["key"]) for c in calls(ledger, "create_ticket")] == [
        ("call", first.key)] + [("lookup", first.key)] * 2 * 2 + [("call", first.key)]
    # one span per reconcile of the row before a retry, named for its tool (no round spans)
    assert [span["agentsaga.key"] for span in traced.named("reconcile create_ticket")] == [
        first.key, first.key]
    assert traced.named("reconcile lookup") == []


def test_a_step_re_sent_reworded_and_lost_again_is_sent_again_only_as_last_sent(
        pg: str, ledger: str) -> None:
    """R7 with a time contract, for a step whose attempts differ: sent, lost, settled
    NotHappened by a person, sent again reworded under the same key, lost again. Within the
    deduplication window what may go again is what was sent last, not what the row keeps:
    called with the first wording, UNKNOWN and nothing sent; with the last, sent again under
    the same key, and that is the effect the ticket system holds."""
    registry = ledger_tools.build_registry()
    registry.override_timing({"create_ticket": {"visible_within_s": 3600.0,
                                                "dedupes_for_s": 86400.0}})
    first, last = {"summary": "a", "order_id": "1"}, {"summary": "b", "order_id": "1"}
    with SagaLog(pg, min_size=1, max_size=2).open() as saga_log:
        service = SagaService(saga_log, registry, Settings(recheck_pause_s=0.01),
                              sleep=lambda _: None)
        service.begin_run("resent")
        add_fault(ledger, "create_ticket", "lost", times=2)
        lost = service.dispatch("resent", "create_ticket", first)
        assert (lost.outcome, lost.step_idx) == ("UNKNOWN", 0)
        settle(saga_log, "resent", 0, SettlementOutcome.NOT_HAPPENED, settler="ops",
               reason="not in the ticket system's console")
        reworded = service.dispatch("resent", "create_ticket", last)
        assert (reworded.outcome, reworded.step_idx, reworded.key) == ("UNKNOWN", 0, lost.key)
        assert [(a.step_idx, a.args) for a in saga_log.attempts("resent")] == [(0, last)]
        stale = service.dispatch("resent", "create_ticket", first)
        assert (stale.outcome, stale.status, stale.key) == ("UNKNOWN", "UNKNOWN", lost.key)
        assert stale.retry_after_s is not None and stale.retry_after_s > 0
        assert effects(ledger, "ticket") == []
        again = service.dispatch("resent", "create_ticket", last)
        [row] = saga_log.steps("resent")
    assert (again.outcome, again.step_idx, again.key) == ("CONFIRMED", 0, lost.key)
    [ticket] = effects(ledger, "ticket")
    assert (ticket["key"], ticket["body"]) == (lost.key, last)
    assert (row.status, row.external_ref, row.args) == ("CONFIRMED", again.external_ref, first)
    assert again.external_ref == f"TICKET-{ticket['id']}"
    assert [(c["what"], c["key"]) for c in calls(ledger, "create_ticket")] == (
        [("call", lost.key)] * 2 + [("lookup", lost.key)] * 2 * 2 + [("call", lost.key)])


@pytest.mark.allow_effect_warnings("the surprise it provokes is logged as a warning")
@pytest.mark.parametrize(("fault", "level", "cause"), [
    # a connector's own word: expected, no traceback
    ("unknown_after_commit", logging.INFO, "504 Gateway Timeout (after the effect was committed)"),
    # a surprise no connector named: a warning with its traceback, for whoever reads the log
    ("reset_after_commit", logging.WARNING, "connection reset by peer"),
])
def test_an_unknown_outcome_is_logged_with_its_step_and_a_surprise_with_its_traceback(
        dispatcher: SagaService, ledger: str, caplog: pytest.LogCaptureFixture, fault: str,
        level: int, cause: str) -> None:
    dispatcher.begin_run("r-log")
    add_fault(ledger, "create_ticket", fault)
    with caplog.at_level(logging.INFO, logger="agentsaga.saga.dispatch"):
        out = dispatcher.dispatch("r-log", "create_ticket", {"summary": "a", "order_id": "1"})
    assert (out.outcome, out.status) == ("UNKNOWN", "UNKNOWN")
    [record] = [r for r in caplog.records if r.name == "agentsaga.saga.dispatch"]
    assert record.levelno == level
    assert bool(record.exc_info) == (level == logging.WARNING)
    assert record.getMessage() == f"outcome unknown: create_ticket: {cause}"
    assert {field: getattr(record, field, None) for field in ("run_id", "step", "tool", "key")} \
        == {"run_id": "r-log", "step": 0, "tool": "create_ticket", "key": out.key}
    step = dispatcher.saga_log.step("r-log", 0)
    name = "OutcomeUnknown" if fault == "unknown_after_commit" else "ConnectionResetError"
    assert step is not None and step.error == f"{name}: create_ticket: {cause}"


def test_a_confirmed_step_carries_no_error(dispatcher: SagaService, ledger: str) -> None:
    dispatcher.begin_run("r-ok")
    dispatcher.dispatch("r-ok", "create_ticket", {"summary": "a", "order_id": "1"})
    with psycopg.connect(ledger) as conn:
        assert conn.execute("SELECT status, error FROM saga_log WHERE run_id = 'r-ok'"
                            ).fetchall() == [("CONFIRMED", None)]


def booking_registry(dsn: str, during: Callable[[SagaLog, Step], None], *, then: str,
                     ref: str = "B-1") -> Registry:
    """A tool `book` during whose call something happens to its run through a second handle on
    the log (`during`, given the step as written); `then` is what the call itself then sees: its
    own result, an unknown outcome, or a refusal (with a reason or none)."""
    registry = Registry()

    @registry.tool(cls="compensatable", lookup=lambda key: None,
                   compensate=lambda args, key: Compensation("cancel_booking", {"by_key": key}))
    def book(what: str, idempotency_key: str) -> dict[str, str]:
        with SagaLog(dsn, min_size=1, max_size=1).open() as other:
            step = other.step_by_key(idempotency_key)
            assert step is not None and step.status == StepStatus.INTENDED
            during(other, step)
        if then == "unknown":
            raise OutcomeUnknown("504 after the booking")
        if then == "rejected":
            raise Rejected("no rooms left")
        if then == "rejected_with_no_reason":
            raise Rejected("")
        return {"id": ref, "what": what}

    @registry.tool(cls="irreversible", lookup=NO_LOOKUP)
    def cancel_booking(by_key: str, idempotency_key: str) -> None:
        raise AssertionError("not called here")

    return registry


def settling_registry(dsn: str, *, then: str,
                      settle_as: StepStatus = StepStatus.CONFIRMED) -> Registry:
    """`book`, whose step another writer of the same epoch settles while it runs (as a
    Reconcile of the same owner, finding the booking by its key, would)."""
    def settle(other: SagaLog, step: Step) -> None:
        found = settle_as == StepStatus.CONFIRMED
        assert other.record_outcome(
            step.run_id, step.writer_epoch, step.step_idx, settle_as,
            result={"id": "B-1", "found": "by key"} if found else None,
            external_ref="B-1" if found else None) is not None

    return booking_registry(dsn, settle, then=then)


@pytest.mark.parametrize("then", ["returned", "unknown", "rejected"])
def test_a_call_whose_step_was_settled_meanwhile_keeps_the_logs_word_and_records_what_it_saw(
        pg: str, then: str) -> None:
    """R7: the row settled first stands, and is the answer: an agent told that a call whose
    effect the log holds failed or may not have happened would make it again, under a new step
    and a new key. The call's own answer is kept beside it, never lost."""
    with SagaLog(pg, min_size=1, max_size=2).open() as saga_log:
        service = SagaService(saga_log, settling_registry(pg, then=then),
                              Settings(recheck_pause_s=0.01), sleep=lambda _: None)
        service.begin_run("r-meanwhile")
        out = service.dispatch("r-meanwhile", "book", {"what": "room"})
        step = saga_log.step("r-meanwhile", 0)
        observations = saga_log.observations("r-meanwhile")
    assert step is not None and (step.status, step.result) == (
        StepStatus.CONFIRMED, {"id": "B-1", "found": "by key"})
    [seen] = observations
    assert (seen.step_idx, seen.key, seen.writer_epoch) == (0, step.idempotency_key,
                                                             step.writer_epoch)
    assert out == DispatchResult(DispatchOutcome.CONFIRMED, 0, step.idempotency_key,
                                 {"id": "B-1", "found": "by key"}, "B-1", "", "CONFIRMED")
    assert (seen.outcome, seen.external_ref, seen.result, seen.error) == {
        "returned": (StepStatus.CONFIRMED, "B-1", {"id": "B-1", "what": "room"}, None),
        "unknown": (StepStatus.UNKNOWN, None, None, "OutcomeUnknown: 504 after the booking"),
        "rejected": (StepStatus.FAILED, None, None, "no rooms left"),
    }[then]


def test_no_observation_is_recorded_when_the_call_writes_its_own_outcome(
        dispatcher: SagaService, ledger: str) -> None:
    dispatcher.begin_run("r-own")
    dispatcher.dispatch("r-own", "create_ticket", {"summary": "a", "order_id": "1"})
    add_fault(ledger, "create_ticket", "unknown_after_commit")
    dispatcher.dispatch("r-own", "create_ticket", {"summary": "b", "order_id": "2"})
    assert [r[2] for r in rows(ledger)] == ["CONFIRMED", "UNKNOWN"]
    assert dispatcher.saga_log.observations("r-own") == []


CRASHING_DISPATCH = """
from agentsaga.service.saga_service import SagaService
from agentsaga.settings import Settings
from agentsaga.store import SagaLog
from sagatest import ledger_tools

with SagaLog(sys.argv[1], min_size=1, max_size=1).open() as saga_log:
    service = SagaService(saga_log, ledger_tools.build_registry(), Settings())
    service.begin_run("r-crash")
    service.dispatch("r-crash", "create_ticket", {"summary": "a", "order_id": "1"})
"""


@pytest.mark.parametrize(("point", "effects_left"), [
    ("after_intent:create_ticket", 0),  # the row committed, the tool not yet called
    ("after_call:create_ticket", 1),  # the tool returned, its outcome not yet written
])
def test_a_dispatch_killed_at_each_crash_point_leaves_its_intent_and_the_next_call_settles_it(
        dispatcher: SagaService, ledger: str, point: str, effects_left: int) -> None:
    """R2, R7: whatever line the process dies at, the INTENDED row is there and the next call of
    the tool settles it by its key: the effect happens exactly once."""
    support = Path(ledger_tools.__file__).resolve().parent.parent
    env = {**os.environ, "AGENTSAGA_CRASH_AT": point, "LEDGER_DSN": ledger,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(support),
                                                       os.environ.get("PYTHONPATH")]))}
    # the child runs the very package this test imported (under `make mutate`, the mutant's)
    killed = subprocess.run(imported_package_python(CRASHING_DISPATCH, ledger), env=env,
                            capture_output=True, text=True, timeout=60)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert f"crash point {point} reached" in killed.stderr
    key = step_key("r-crash", 0, "create_ticket")
    assert rows(ledger) == [(0, "create_ticket", "INTENDED", key)]
    assert len(effects(ledger, "ticket")) == effects_left
    assert dispatcher.begin_run("r-crash").next_step == 1  # the restarted sidecar adopts it
    out = dispatcher.dispatch("r-crash", "create_ticket", {"summary": "a", "order_id": "1"})
    assert (out.outcome, out.key, out.step_idx) == ("CONFIRMED", key, 0)
    assert [e["key"] for e in effects(ledger, "ticket")] == [key]


class SdkObject:
    """What an SDK returns: not a dict, but it renders itself as one (the Stripe SDK's
    `to_dict`)."""

    def __init__(self, **fields: object) -> None:
        self.fields = fields

    def to_dict(self) -> dict[str, object]:
        return dict(self.fields)


def test_a_result_that_renders_itself_as_json_is_stored_and_answered_as_that_json(
        pg: str) -> None:
    registry = Registry()

    @registry.tool(cls="compensatable", lookup=lambda key: None,
                   compensate=lambda args, key: Compensation("void", {"by_key": key}))
    def issue(amount: int, idempotency_key: str) -> SdkObject:
        return SdkObject(id="in_1", amount=amount)

    @registry.tool(cls="irreversible", lookup=NO_LOOKUP)
    def void(by_key: str, idempotency_key: str) -> None:
        raise AssertionError("not called here")

    @registry.tool(cls="pure")
    def quote(amount: int) -> SdkObject:
        return SdkObject(id="qt_1", total=amount * 2)

    @registry.tool(cls="compensatable", lookup=lambda key: None,
                   compensate=lambda args, key: Compensation("void", {"by_key": key}))
    def decline(amount: int, idempotency_key: str) -> None:
        raise Rejected("")  # a refusal that gives no reason

    with SagaLog(pg, min_size=1, max_size=2).open() as saga_log:
        service = SagaService(saga_log, registry, Settings(recheck_pause_s=0.01))
        service.begin_run("r-sdk")
        issued = service.dispatch("r-sdk", "issue", {"amount": 5})
        quoted = service.dispatch("r-sdk", "quote", {"amount": 5})
        declined = service.dispatch("r-sdk", "decline", {"amount": 5})
        step = saga_log.step("r-sdk", 0)
    assert (issued.outcome, issued.result, issued.external_ref) == (
        "CONFIRMED", {"id": "in_1", "amount": 5}, "in_1")
    assert step is not None and (step.result, step.external_ref) == (
        {"id": "in_1", "amount": 5}, "in_1")
    assert (quoted.outcome, quoted.result, quoted.external_ref) == (
        "CONFIRMED", {"id": "qt_1", "total": 10}, "qt_1")
    assert (declined.outcome, declined.message, declined.status) == ("FAILED", "", "FAILED")


def adopting_registry(dsn: str, *, then: str) -> Registry:
    """`book`, during whose call another sidecar adopts the run (BeginRun: a newer epoch)."""
    def adopt(other: SagaLog, step: Step) -> None:
        SagaService(other, Registry(), Settings()).begin_run(step.run_id)

    return booking_registry(dsn, adopt, then=then, ref="B-7")


@pytest.mark.parametrize("then", ["returned", "unknown"])
def test_a_call_whose_run_was_adopted_meanwhile_writes_no_outcome_and_keeps_what_it_saw(
        pg: str, then: str) -> None:
    """R12: the stale writer's outcome is refused and changes no row; what the real system
    answered is kept as an observation under the stale epoch, for the new owner's reconcile."""
    with SagaLog(pg, min_size=1, max_size=2).open() as saga_log:
        service = SagaService(saga_log, adopting_registry(pg, then=then),
                              Settings(recheck_pause_s=0.01), sleep=lambda _: None)
        service.begin_run("r-adopted")
        before = saga_log.step("r-adopted", 0)
        with pytest.raises(Fenced):
            service.dispatch("r-adopted", "book", {"what": "room"})
        step = saga_log.step("r-adopted", 0)
        [seen] = saga_log.observations("r-adopted")
    assert before is None and step is not None
    assert (step.status, step.writer_epoch, step.result, step.error) == (
        StepStatus.INTENDED, 1, None, None)
    assert (seen.step_idx, seen.key, seen.writer_epoch) == (0, step.idempotency_key, 1)
    if then == "returned":
        assert (seen.outcome, seen.external_ref, seen.result, seen.error) == (
            StepStatus.CONFIRMED, "B-7", {"id": "B-7", "what": "room"}, None)
    else:
        assert (seen.outcome, seen.external_ref, seen.result, seen.error) == (
            StepStatus.UNKNOWN, None, None, "OutcomeUnknown: 504 after the booking")


def test_a_rejected_call_answers_failed_with_the_systems_reason(dispatcher: SagaService,
                                                                 ledger: str) -> None:
    dispatcher.begin_run("r-rejected")
    add_fault(ledger, "charge_card", "reject")
    out = dispatcher.dispatch("r-rejected", "charge_card", {"customer_id": "c", "amount": 5})
    assert out == DispatchResult(
        DispatchOutcome.FAILED, 0, step_key("r-rejected", 0, "charge_card"),
        message="charge_card: rejected by the ledger", status=StepStatus.FAILED)


class CutAfterUnknownOutcome(NoHooks):
    """Every other connection to the database is cut right after the first UNKNOWN outcome
    is written (Postgres restarted between the outcome and the hand-over to a person)."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.armed = True

    def on_outcome(self, step: Step) -> None:
        if self.armed and step.status == StepStatus.UNKNOWN:
            self.armed = False
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                # each waited for (up to 10 s): the pool's connections are dead before it goes on
                conn.execute("SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity"
                             " WHERE datname = current_database() AND pid <> pg_backend_pid()")


@pytest.mark.allow_effect_warnings("the hand-over to a person it provokes fails")
def test_a_hand_over_to_a_person_the_log_could_not_record_is_asked_again_by_reconcile(
        ledger: str, caplog: pytest.LogCaptureFixture, operator_log: OperatorStore) -> None:
    saga_log = SagaLog(ledger, min_size=1, max_size=1,
                       hooks=CutAfterUnknownOutcome(ledger)).open()
    try:
        service = SagaService(saga_log, ledger_tools.build_registry(),
                              Settings(recheck_pause_s=0.01), sleep=lambda _: None)
        service.begin_run("r-ask")
        operator_log.set_policy("r-ask", {"irreversibleBeforePivot": "count"})
        add_fault(ledger, "send_email", "unknown_after_commit")
        with caplog.at_level(logging.WARNING, logger="agentsaga.saga.dispatch"):
            out = service.dispatch("r-ask", "send_email", {"to": "c@example.com", "body": "b"})
        assert (out.outcome, out.step_idx, out.status) == ("NEEDS_HUMAN", 0, "UNKNOWN")
        [record] = [r for r in caplog.records if r.name == "agentsaga.saga.dispatch"]
        said = re.fullmatch(
            r"send_email ran and its outcome is UNKNOWN; the saga log's Postgres at (\S+) could "
            r"not record that it waits for a person \((.+)\); the next reconcile asks again",
            record.getMessage())
        assert said is not None, record.getMessage()
        assert conninfo_to_dict(ledger)["dbname"] in said.group(1)
        assert "terminat" in said.group(2), record.getMessage()  # why Postgres went away
        assert {field: getattr(record, field, None) for field in ("run_id", "step", "tool")} \
            == {"run_id": "r-ask", "step": 0, "tool": "send_email"}
    finally:
        saga_log.close()
    with SagaLog(ledger, min_size=1, max_size=2).open() as restarted:  # the sidecar restarted
        assert restarted.settlements("r-ask") == []
        service = SagaService(restarted, ledger_tools.build_registry(),
                              Settings(recheck_pause_s=0.01), sleep=lambda _: None)
        service.begin_run("r-ask")
        service.reconcile("r-ask")
        [waiting] = restarted.settlements("r-ask", waiting_only=True)
    assert (waiting.step_idx, waiting.step_key, waiting.state) == (0, out.key, "Waiting")


def test_a_step_another_writer_took_at_the_same_moment_is_not_called(
        dispatcher: SagaService, ledger: str, pg: str) -> None:
    """The INSERT of the intent is the arbiter: a step index someone else wrote first (here a
    second handle on the log, behind the service's cached view of the run) is not called."""
    began = dispatcher.begin_run("r-race")
    dispatcher.dispatch("r-race", "create_ticket", {"summary": "a", "order_id": "1"})
    key = step_key("r-race", 1, "create_ticket")
    with SagaLog(pg, min_size=1, max_size=1).open() as other:
        assert other.record_intent(
            "r-race", began.run.owner_epoch, 1, tool="create_ticket", tool_class="compensatable",
            key=key,
            args={"summary": "other", "order_id": "2"}, compensation=None,
            audience=["support_team"]) is not None
    out = dispatcher.dispatch("r-race", "create_ticket", {"summary": "b", "order_id": "3"})
    assert out == DispatchResult(
        DispatchOutcome.STEP_UNRESOLVED, 1, key, status="INTENDED",
        message="step 1 is taken, or an earlier step is still unresolved; call again to see "
                "which")
    assert len(calls(ledger, "create_ticket")) == 1
    assert [(r[0], r[2]) for r in rows(ledger)] == [(0, "CONFIRMED"), (1, "INTENDED")]
    # the next call reads what is really there: step 1, never called, settled by its key and
    # run under that key
    again = dispatcher.dispatch("r-race", "create_ticket", {"summary": "b", "order_id": "3"})
    assert (again.outcome, again.step_idx, again.key) == ("CONFIRMED", 1, key)
    assert [e["key"] for e in effects(ledger, "ticket")][1:] == [key]


def test_a_compensation_naming_an_unregistered_tool_refuses_the_call_before_anything_is_written(
        pg: str) -> None:
    """R6: an unwind could never run it, so the call is not made."""
    registry = Registry()
    made: list[str] = []

    @registry.tool(cls="compensatable", lookup=lambda key: None,
                   compensate=lambda args, key: Compensation("unbook", {"by_key": key}))
    def book(what: str, idempotency_key: str) -> dict[str, str]:
        made.append(what)
        return {"id": "B-1"}

    with SagaLog(pg, min_size=1, max_size=2).open() as saga_log:
        service = SagaService(saga_log, registry, Settings(recheck_pause_s=0.01))
        service.begin_run("r-nocomp")
        with pytest.raises(CompensationUnavailable) as refused:
            service.dispatch("r-nocomp", "book", {"what": "room"})
        assert saga_log.steps("r-nocomp") == []
    assert str(refused.value) == (
        "tool 'book': its compensation names the tool 'unbook', which is not registered in this "
        "process, so an unwind could never run it; the call was refused and nothing was written "
        "or sent. Register 'unbook' in the same tools module (--tools)")
    assert made == []


@pytest.mark.parametrize("then", ["unknown", "rejected", "rejected_with_no_reason"])
def test_a_call_whose_step_was_settled_not_executed_meanwhile_answers_with_that_row(
        pg: str, then: str) -> None:
    """Settled as never happened while the call was on the wire (a person's word, or a lookup
    certain of absence), and the call saw no effect: the answer names the row as it is. A
    rejected call says why; otherwise the agent calls again, and the same step runs under the
    same key (R3)."""
    with SagaLog(pg, min_size=1, max_size=2).open() as saga_log:
        service = SagaService(saga_log, settling_registry(
            pg, then=then, settle_as=StepStatus.NOT_EXECUTED), Settings(recheck_pause_s=0.01),
            sleep=lambda _: None)
        service.begin_run("r-undone")
        out = service.dispatch("r-undone", "book", {"what": "room"})
        step = saga_log.step("r-undone", 0)
        [seen] = saga_log.observations("r-undone")
    assert step is not None and step.status == StepStatus.NOT_EXECUTED
    key = step_key("r-undone", 0, "book")
    if then.startswith("rejected"):
        reason = "no rooms left" if then == "rejected" else ""
        assert out == DispatchResult(DispatchOutcome.FAILED, 0, key, message=reason,
                                     status="NOT_EXECUTED")
    else:
        # the tool's time contract sets no deadline: absence is certain at once
        assert out == DispatchResult(
            DispatchOutcome.UNKNOWN, 0, key, status="NOT_EXECUTED", retry_after_s=0.0,
            message=UNKNOWN_MESSAGE + " Call the same tool again in 0.0s or later: by then the "
                                      "harness can be certain.")
    assert seen.outcome == {"unknown": StepStatus.UNKNOWN, "rejected": StepStatus.FAILED,
                            "rejected_with_no_reason": StepStatus.FAILED}[then]


@pytest.mark.allow_effect_warnings("the re-opened row is warned about")
def test_a_call_that_returns_its_effect_after_its_step_was_settled_not_executed_reopens_it(
        pg: str) -> None:
    """Settled as never happened while the call was on the wire, but the call came back with
    its effect: the real system's word outranks the log's (R7). The row is re-opened as
    CONFIRMED with that effect (so an unwind compensates it) and the agent is told CONFIRMED;
    its next call is a new step, and the booking is never made twice."""
    made: list[str] = []

    def settle_as_never_happened(other: SagaLog, step: Step) -> None:
        made.append(step.idempotency_key)
        assert other.record_outcome(step.run_id, step.writer_epoch, step.step_idx,
                                    StepStatus.NOT_EXECUTED) is not None

    with SagaLog(pg, min_size=1, max_size=2).open() as saga_log:
        service = SagaService(saga_log, booking_registry(pg, settle_as_never_happened,
                                                         then="returned"),
                              Settings(recheck_pause_s=0.01), sleep=lambda _: None)
        service.begin_run("r-late")
        out = service.dispatch("r-late", "book", {"what": "room"})
        step = saga_log.step("r-late", 0)
        [seen] = saga_log.observations("r-late")
        again = service.dispatch("r-late", "book", {"what": "room"})
    key = step_key("r-late", 0, "book")
    assert (again.outcome, again.step_idx) == ("CONFIRMED", 1)
    assert out == DispatchResult(DispatchOutcome.CONFIRMED, 0, key, {"id": "B-1", "what": "room"},
                                 "B-1", "", "CONFIRMED")
    assert step is not None and (step.status, step.external_ref, step.result, step.error) == (
        StepStatus.CONFIRMED, "B-1", {"id": "B-1", "what": "room"},
        "reopened: its effect was observed after it was settled NOT_EXECUTED")
    assert (seen.outcome, seen.external_ref) == (StepStatus.CONFIRMED, "B-1")
    assert made == [key, step_key("r-late", 1, "book")]


@pytest.mark.allow_effect_warnings("the re-opened row is warned about")
def test_a_step_settled_not_executed_whose_effect_a_late_call_saw_is_not_sent_again(
        dispatcher: SagaService, ledger: str) -> None:
    """A job settled the step as never happened; then a call of a fenced writer came back and
    recorded that it did happen. The agent's next call of the tool re-opens the row as
    CONFIRMED from that observation and sends nothing (R7): re-sent under its key, the step
    would happen twice wherever the real system no longer dedupes it."""
    began = dispatcher.begin_run("r-seen")
    epoch = began.run.owner_epoch
    key = step_key("r-seen", 0, "create_ticket")
    saga_log = dispatcher.saga_log
    intended = saga_log.record_intent(
        "r-seen", epoch, 0, tool="create_ticket", tool_class="compensatable", key=key,
        args={"summary": "a", "order_id": "1"}, compensation=None, audience=["support_team"])
    assert intended is not None
    assert saga_log.record_outcome("r-seen", epoch, 0, StepStatus.NOT_EXECUTED) is not None
    saga_log.record_observation(intended, epoch - 1, StepStatus.CONFIRMED, external_ref="T-late",
                                result={"id": "T-late"}, error=None)
    out = dispatcher.dispatch("r-seen", "create_ticket", {"summary": "a", "order_id": "1"})
    assert out == DispatchResult(DispatchOutcome.CONFIRMED, 0, key, {"id": "T-late"}, "T-late",
                                 "already happened: a late call observed its effect",
                                 "CONFIRMED")
    assert rows(ledger) == [(0, "create_ticket", "CONFIRMED", key)]
    assert calls(ledger, "create_ticket") == []
    then = dispatcher.dispatch("r-seen", "create_ticket", {"summary": "b", "order_id": "2"})
    assert (then.outcome, then.step_idx) == ("CONFIRMED", 1)


def test_a_compensation_its_tool_would_refuse_refuses_the_call_before_anything_is_written(
        pg: str) -> None:
    """R6: built before the call, the compensation is checked as its own call will be (a
    `ref(key)` taken as an id): one its tool would refuse could never undo the call."""
    registry = Registry()
    made: list[str] = []

    @registry.tool(cls="compensatable", lookup=lambda key: None,
                   compensate=lambda args, key: Compensation(
                       "refund", {"payment": ref(key), "amount": "all"}))
    def charge(amount: int, idempotency_key: str) -> dict[str, str]:
        made.append(idempotency_key)
        return {"id": "ch_1"}

    @registry.tool(cls="irreversible", lookup=NO_LOOKUP)
    def refund(payment: str, idempotency_key: str, amount: int | None = None) -> None:
        raise AssertionError("not called here")

    with SagaLog(pg, min_size=1, max_size=2).open() as saga_log:
        service = SagaService(saga_log, registry, Settings(recheck_pause_s=0.01))
        service.begin_run("r-badcomp")
        with pytest.raises(CompensationUnavailable) as refused:
            service.dispatch("r-badcomp", "charge", {"amount": 500})
        assert saga_log.steps("r-badcomp") == []
    assert str(refused.value) == (
        "tool 'charge': its compensation could not run as it would be written (tool 'refund': "
        "argument 'amount' must be an integer or null, got \"all\" (Input should be a valid "
        "integer)), so an unwind could never undo the call; the call was refused and nothing "
        "was written or sent. Fix the tool's compensate= function")
    assert made == []


def test_an_irreversible_call_with_no_compensation_is_written_with_none(
        dispatcher: SagaService, ledger: str, operator_log: OperatorStore) -> None:
    """Counted before the pivot (the run's policy), a tool nothing undoes leaves no
    compensation on its row: the unwind hands it to a person instead."""
    dispatcher.begin_run("r-refund")
    operator_log.set_policy("r-refund", {"irreversibleBeforePivot": "count"})
    out = dispatcher.dispatch("r-refund", "refund", {"charge_key": "k-1"})
    step = dispatcher.saga_log.step("r-refund", 0)
    assert out.outcome == "CONFIRMED"
    assert step is not None and (step.status, step.compensation) == ("CONFIRMED", None)


def test_the_intent_waits_for_the_wal_flush_and_the_outcome_need_not(
        dispatcher: SagaService, ledger: str) -> None:
    """R2: the INTENDED row is committed durably before the call, whatever the outcome mode; an
    outcome may be committed without waiting (lost to a crash, it is settled by its key, R7).
    Each write is seen from inside Postgres: a trigger notes the `synchronous_commit` it ran
    under."""
    with psycopg.connect(ledger, autocommit=True) as conn:
        conn.execute("CREATE TABLE commit_modes (op text, mode text)")
        conn.execute(
            "CREATE FUNCTION note_commit_mode() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
            " INSERT INTO commit_modes VALUES (TG_OP, current_setting('synchronous_commit'));"
            " RETURN NEW; END $$")
        conn.execute("CREATE TRIGGER note_commit_mode AFTER INSERT OR UPDATE ON saga_log"
                     " FOR EACH ROW EXECUTE FUNCTION note_commit_mode()")
    dispatcher.begin_run("r-durable")
    out = dispatcher.dispatch("r-durable", "create_ticket", {"summary": "a", "order_id": "1"})
    assert out.outcome == "CONFIRMED"
    with psycopg.connect(ledger) as conn:
        assert conn.execute("SELECT op, mode FROM commit_modes").fetchall() == [
            ("INSERT", "on"), ("UPDATE", "off")]


def test_a_run_cannot_succeed_while_a_step_is_unknown(dispatcher: SagaService,
                                                     ledger: str) -> None:
    """Ended Succeeded over an unknown step, nobody would ever settle it (R5, R7): refused,
    saying what to do, and nothing changes; as Failed, its unwind settles it."""
    dispatcher.begin_run("r-end")
    add_fault(ledger, "create_ticket", "unknown_after_commit")
    unknown = dispatcher.dispatch("r-end", "create_ticket", {"summary": "a", "order_id": "1"})
    assert unknown.outcome == "UNKNOWN"
    with pytest.raises(RunUnsettled) as refused:
        dispatcher.end_run("r-end", "Succeeded")
    assert str(refused.value) == (
        "run 'r-end' cannot succeed: step 0 (create_ticket) has an unknown outcome; call "
        "create_ticket again to settle it, or end the run as Failed (its unwind settles it). "
        "Nothing was changed.")
    assert dispatcher.saga_log.require_run("r-end").state == RunState.RUNNING
    settled = dispatcher.dispatch("r-end", "create_ticket", {"summary": "a", "order_id": "1"})
    assert settled.outcome == "CONFIRMED"
    assert dispatcher.end_run("r-end", "Succeeded").state == RunState.SUCCEEDED


def test_a_run_waiting_for_a_person_says_so_when_asked_to_succeed(
        dispatcher: SagaService, ledger: str, operator_log: OperatorStore) -> None:
    dispatcher.begin_run("r-human")
    operator_log.set_policy("r-human", {"irreversibleBeforePivot": "count"})
    add_fault(ledger, "send_email", "unknown_after_commit")
    out = dispatcher.dispatch("r-human", "send_email", {"to": "a@example.com", "body": "b"})
    assert out.outcome == "NEEDS_HUMAN"
    with pytest.raises(RunUnsettled, match=r"only a person can settle it \(agentsaga settle "
                                           r"--run r-human --step 0"):
        dispatcher.end_run("r-human", "Succeeded")
    assert dispatcher.end_run("r-human", "Failed").state == RunState.FAILED
