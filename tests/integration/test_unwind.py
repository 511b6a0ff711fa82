"""Reconcile and unwind against the world: ground truth after every step, crashes half-way."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import time
from collections.abc import Iterator

import psycopg
import pytest

from agentsaga import step_key, telemetry
from agentsaga.connectors.tools import register_all
from agentsaga.errors import UnknownTool
from agentsaga.keys import compensation_key
from agentsaga.saga.registry import NO_LOOKUP, Compensation, Registry
from agentsaga.saga.resolution import reconcile_run, unwind_run
from agentsaga.saga.resolution_report import ResolutionReport
from agentsaga.saga.unwind import resolve_refs
from agentsaga.service.saga_service import SagaService
from agentsaga.settings import Settings
from agentsaga.states import CompensationStatus, StepStatus
from agentsaga.store import SagaLog
from agentsaga_lab.demo.world import connector_env
from agentsaga_lab.world import Fault, ManualClock, World
from agentsaga_lab.world.exchanges import Exchange
from sagatest.cli_tools import imported_package_python
from sagatest.traced import Traced

TICKET = {"summary": "Refund for order 1182", "order_id": "1182"}
CHARGE = {"customer_id": "cus_1", "amount": 500, "order_id": "1182"}
TRANSITIONS = "POST /rest/api/3/issue/{key}/transitions"


@pytest.fixture
def registry(world: World) -> Registry:
    return register_all(Registry(), connector_env(world.url))


@pytest.fixture
def saga_log(pg: str) -> Iterator[SagaLog]:
    log = SagaLog(pg, min_size=1, max_size=4).open()
    yield log
    log.close()


@pytest.fixture
def dispatcher(saga_log: SagaLog, registry: Registry) -> SagaService:
    return SagaService(saga_log, registry, Settings(recheck_pause_s=0.05))


def statuses(log: SagaLog, run_id: str) -> list[tuple[str, str, str | None]]:
    return [(s.tool, s.status, s.comp_status) for s in log.steps(run_id)]


def test_reconcile_settles_unknown_rows_through_a_lagging_index(
        world: World, clock: ManualClock, dispatcher: SagaService, saga_log: SagaLog,
        registry: Registry) -> None:
    world.set_search_lag(0.2)
    dispatcher.begin_run("r1")
    world.faults.add(Fault("POST", "/rest/api/3/issue", "commit_then_504", on_call=1))
    assert dispatcher.dispatch("r1", "create_ticket", TICKET).outcome == "UNKNOWN"
    pauses: list[float] = []

    def pause(seconds: float) -> None:
        pauses.append(seconds)
        clock.advance(seconds)  # the index catches up during the pause

    report = reconcile_run(saga_log, registry, "r1", "job", recheck_pause_s=0.3, sleep=pause)
    assert pauses == [0.3]
    [ticket] = world.truth()["tickets"]
    assert report.settled and report.reconciled[0]["ref"] == ticket["key"]
    assert statuses(saga_log, "r1") == [("create_ticket", "CONFIRMED", None)]
    assert saga_log.require_run("r1").owner_epoch == 2  # adopted (R12)


def test_reconcile_marks_not_executed_only_once_it_is_certain(
        world: World, saga_log: SagaLog) -> None:
    """R7: an empty lookup proves absence only after the call's deadline plus the lag."""
    env = {**connector_env(world.url), "AGENTSAGA_TIME_CONTRACTS":
           '{"create_ticket": {"call_timeout_s": 0.3, "visible_within_s": 0.2}}'}
    registry = register_all(Registry(), env)
    dispatcher = SagaService(saga_log, registry, Settings(recheck_pause_s=0.01))
    dispatcher.begin_run("r2")
    world.faults.add(Fault("POST", "/rest/api/3/issue", "fail_before_commit_502", on_call=1))
    answer = dispatcher.dispatch("r2", "create_ticket", TICKET)
    assert answer.outcome == "UNKNOWN" and answer.retry_after_s is not None
    early = reconcile_run(saga_log, registry, "r2", "job", recheck_pause_s=0.01)
    if early.wait_s is not None:  # still inside deadline + lag: not settled, and says when
        assert not early.settled and early.unsettled[0]["retry_after_s"] <= 0.5
    waited: list[float] = []

    def wait(seconds: float, report: ResolutionReport) -> None:
        waited.append(seconds)
        time.sleep(seconds)  # the condition is the database's clock, re-read by reconcile

    report = reconcile_run(saga_log, registry, "r2", "job", recheck_pause_s=0.01, wait=wait)
    assert report.settled and world.truth()["tickets"] == []
    assert statuses(saga_log, "r2") == [("create_ticket", "NOT_EXECUTED", None)]


def test_unwind_compensates_backwards_once_and_receipts_off_is_silent(
        world: World, dispatcher: SagaService, saga_log: SagaLog, registry: Registry) -> None:
    dispatcher.begin_run("r3")
    dispatcher.dispatch("r3", "create_ticket", TICKET)
    dispatcher.dispatch("r3", "charge_card", CHARGE)
    report = unwind_run(saga_log, registry, "r3", "job", recheck_pause_s=0.01)
    assert report.settled
    assert [c["tool"] for c in report.compensated] == ["charge_card", "create_ticket"]
    again = unwind_run(saga_log, registry, "r3", "job2", recheck_pause_s=0.01)
    assert again.compensated == [] and again.settled
    truth = world.truth()
    assert [t["state"] for t in truth["tickets"]] == ["closed"]
    assert [p["status"] for p in truth["payment_intents"]] == ["canceled"]
    assert truth["calls"][TRANSITIONS] == 1 and truth["emails"] == []
    assert [c.state for c in saga_log.corrections("r3")] == ["Silent", "Silent"]
    assert saga_log.require_run("r3").state == "unwound"


def test_charge_with_receipt_gets_a_proposed_correction_ranked_last(
        world: World, dispatcher: SagaService, saga_log: SagaLog, registry: Registry) -> None:
    dispatcher.begin_run("r4")
    dispatcher.dispatch("r4", "create_ticket", TICKET)
    dispatcher.dispatch("r4", "charge_card", {**CHARGE, "receipt": True})
    unwind_run(saga_log, registry, "r4", "job", recheck_pause_s=0.01)
    queue = saga_log.corrections("r4")
    assert [(c.tool, c.state) for c in queue] == [("create_ticket", "Silent"),
                                                  ("charge_card", "Proposed")]
    assert queue[-1].audience == ["customer"] and queue[-1].rank > queue[0].rank
    assert world.truth()["emails"] == []  # proposed, never sent by the harness


def test_rejected_compensation_is_failed_and_reported(
        world: World, dispatcher: SagaService, saga_log: SagaLog, registry: Registry) -> None:
    dispatcher.begin_run("r5")
    dispatcher.dispatch("r5", "charge_card", CHARGE)
    world.faults.add(Fault("POST", "/v1/payment_intents/*/cancel", "reject", status=400))
    report = unwind_run(saga_log, registry, "r5", "job", recheck_pause_s=0.01)
    assert not report.settled and report.failed[0]["tool"] == "charge_card"
    assert statuses(saga_log, "r5") == [("charge_card", "CONFIRMED", "FAILED")]
    assert world.truth()["payment_intents"][0]["status"] == "requires_capture"


def test_unknown_compensation_stays_intended_and_the_next_unwind_finishes_it(
        world: World, dispatcher: SagaService, saga_log: SagaLog, registry: Registry) -> None:
    dispatcher.begin_run("r6")
    dispatcher.dispatch("r6", "charge_card", CHARGE)
    world.faults.add(Fault("POST", "/v1/payment_intents/*/cancel", "commit_then_504", on_call=1))
    first = unwind_run(saga_log, registry, "r6", "job", recheck_pause_s=0.01)
    assert not first.settled and statuses(saga_log, "r6") == [
        ("charge_card", "CONFIRMED", "INTENDED")]
    second = unwind_run(saga_log, registry, "r6", "job2", recheck_pause_s=0.01)
    assert second.settled
    assert statuses(saga_log, "r6") == [("charge_card", "COMPENSATED", "DONE")]
    truth = world.truth()
    assert [p["status"] for p in truth["payment_intents"]] == ["canceled"]
    assert truth["refunds"] == []


def job_command(action: str, run_id: str, dsn: str) -> list[str]:
    """`agentsaga ACTION --run RUN_ID` in a child that runs the package this test imported."""
    return imported_package_python(
        "from agentsaga.cli import main; sys.exit(main(sys.argv[1:]))",
        action, "--run", run_id, "--dsn", dsn, "--tools", "agentsaga.connectors.tools")


@pytest.mark.parametrize("crash_at", ["after_compensation:cancel_or_refund_payment",
                                      "after_compensation:close_ticket"])
def test_unwind_killed_half_way_and_restarted_compensates_nothing_twice(
        world: World, dispatcher: SagaService, saga_log: SagaLog, pg: str, crash_at: str) -> None:
    dispatcher.begin_run("r7")
    dispatcher.dispatch("r7", "create_ticket", TICKET)
    dispatcher.dispatch("r7", "charge_card", CHARGE)
    env = {**os.environ, **connector_env(world.url), "AGENTSAGA_RECHECK_PAUSE_S": "0.01"}
    command = job_command("unwind", "r7", pg)
    killed = subprocess.run(command, env={**env, "AGENTSAGA_CRASH_AT": crash_at},
                            capture_output=True, text=True, timeout=60)
    assert killed.returncode == -9, killed.stderr
    assert "INTENDED" in [s.comp_status for s in saga_log.steps("r7")]
    finished = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert finished.returncode == 0, finished.stdout + finished.stderr
    assert statuses(saga_log, "r7") == [("create_ticket", "COMPENSATED", "DONE"),
                                        ("charge_card", "COMPENSATED", "DONE")]
    truth = world.truth()
    assert [t["state"] for t in truth["tickets"]] == ["closed"]
    assert truth["calls"][TRANSITIONS] == 1  # closed once
    assert [p["status"] for p in truth["payment_intents"]] == ["canceled"]
    assert truth["calls"]["POST /v1/payment_intents/{id}/cancel"] == 1
    assert truth["refunds"] == []
    with psycopg.connect(pg) as conn:
        assert conn.execute("SELECT count(*) FROM corrections WHERE run_id = 'r7'"
                            ).fetchone() == (2,)


def test_a_reconcile_killed_after_finding_the_effect_and_restarted_settles_it_once(
        world: World, dispatcher: SagaService, saga_log: SagaLog, pg: str) -> None:
    """R7: a reconcile that dies between finding the effect by key and writing CONFIRMED leaves
    the row UNKNOWN; the next one finds the same effect and settles it, and nothing is redone."""
    dispatcher.begin_run("r8")
    world.faults.add(Fault("POST", "/v1/payment_intents", "commit_then_504", on_call=1))
    assert dispatcher.dispatch("r8", "charge_card", CHARGE).outcome == "UNKNOWN"
    env = {**os.environ, **connector_env(world.url), "AGENTSAGA_RECHECK_PAUSE_S": "0.01"}
    command = job_command("reconcile", "r8", pg)
    killed = subprocess.run(command, env={**env, "AGENTSAGA_CRASH_AT": "during_reconcile"},
                            capture_output=True, text=True, timeout=60)
    assert killed.returncode == -9, killed.stderr
    assert "crash point during_reconcile reached" in killed.stderr
    assert statuses(saga_log, "r8") == [("charge_card", "UNKNOWN", None)]
    finished = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert finished.returncode == 0, finished.stdout + finished.stderr
    [step] = saga_log.steps("r8")
    [intent] = world.truth()["payment_intents"]
    assert (step.status, step.external_ref) == ("CONFIRMED", intent["id"])
    assert world.truth()["calls"]["POST /v1/payment_intents"] == 1


def test_the_unwind_report_names_each_step_and_what_became_of_it(
        world: World, dispatcher: SagaService, saga_log: SagaLog, registry: Registry) -> None:
    """What an operator reads after an unwind (`agentsaga unwind` prints it): every step, newest
    first, with what was done to it, or why nothing was."""
    dispatcher.begin_run("r9")
    dispatcher.dispatch("r9", "create_ticket", TICKET)
    world.faults.add(Fault("POST", "/v1/payment_intents", "reject", status=402))
    dispatcher.dispatch("r9", "charge_card", CHARGE)
    dispatcher.dispatch("r9", "search_orders", {"order_id": "1182"})
    ticket = world.truth()["tickets"][0]["key"]
    first = unwind_run(saga_log, registry, "r9", "job", recheck_pause_s=0.01)
    again = unwind_run(saga_log, registry, "r9", "job2", recheck_pause_s=0.01)
    silent = [{"step_idx": 0, "tool": "create_ticket", "audience": ["support_team"], "rank": 10,
               "state": "Silent", "correction": None}]
    assert first.to_json() == {
        "run_id": "r9", "action": "unwind", "epoch": 2, "settled": True, "state": "unwound",
        "reconciled": [], "queued": [], "failed": [], "pending": [], "unsettled": [],
        "compensated": [{"step_idx": 0, "tool": "create_ticket", "compensation": "close_ticket",
                         "ref": ticket, "correction": "Silent"}],
        "skipped": [{"step_idx": 1, "tool": "charge_card", "why": "FAILED"}],
        "corrections": silent, "wait_s": None, "waiting": [], "needs_human": False}
    assert again.to_json() == {
        "run_id": "r9", "action": "unwind", "epoch": 3, "settled": True, "state": "unwound",
        "reconciled": [], "compensated": [], "queued": [], "failed": [], "pending": [],
        "unsettled": [],
        "skipped": [{"step_idx": 1, "tool": "charge_card", "why": "FAILED"},
                    {"step_idx": 0, "tool": "create_ticket", "why": "compensated before"}],
        "corrections": silent, "wait_s": None, "waiting": [], "needs_human": False}
    assert [t["state"] for t in world.truth()["tickets"]] == ["closed"]


def test_a_step_compensated_before_does_not_stop_the_unwind_of_older_steps(
        world: World, dispatcher: SagaService, saga_log: SagaLog, registry: Registry) -> None:
    """The charge is refunded, closing the ticket times out (maybe done): the next unwind skips
    the charge and goes on to the ticket, which it closes."""
    dispatcher.begin_run("r10")
    dispatcher.dispatch("r10", "create_ticket", TICKET)
    dispatcher.dispatch("r10", "charge_card", CHARGE)
    world.faults.add(Fault("POST", "/rest/api/3/issue/*/transitions", "commit_then_504",
                           on_call=1))
    first = unwind_run(saga_log, registry, "r10", "job", recheck_pause_s=0.01)
    assert not first.settled and [c["tool"] for c in first.compensated] == ["charge_card"]
    assert [p["tool"] for p in first.pending] == ["create_ticket"]
    second = unwind_run(saga_log, registry, "r10", "job2", recheck_pause_s=0.01)
    assert second.settled and second.skipped == [
        {"step_idx": 1, "tool": "charge_card", "why": "compensated before"}]
    assert [c["tool"] for c in second.compensated] == ["create_ticket"]
    assert statuses(saga_log, "r10") == [("create_ticket", "COMPENSATED", "DONE"),
                                         ("charge_card", "COMPENSATED", "DONE")]
    assert [t["state"] for t in world.truth()["tickets"]] == ["closed"]


def test_a_rejected_compensation_is_reported_again_with_why_and_older_steps_go_on(
        world: World, dispatcher: SagaService, saga_log: SagaLog, registry: Registry) -> None:
    dispatcher.begin_run("r11")
    dispatcher.dispatch("r11", "create_ticket", TICKET)
    dispatcher.dispatch("r11", "charge_card", CHARGE)
    world.faults.add(Fault("POST", "/v1/payment_intents/*/cancel", "reject", status=400))
    first = unwind_run(saga_log, registry, "r11", "job", recheck_pause_s=0.01)
    assert [c["tool"] for c in first.compensated] == ["create_ticket"]
    charge = saga_log.step("r11", 1)
    assert charge is not None and charge.comp_status == "FAILED"
    assert charge.error and charge.error.startswith(
        "compensation cancel_or_refund_payment rejected: ")
    again = unwind_run(saga_log, registry, "r11", "job2", recheck_pause_s=0.01)
    assert not again.settled and again.compensated == []
    assert again.failed == [{"step_idx": 1, "tool": "charge_card", "why": charge.error}]
    assert again.skipped == [{"step_idx": 0, "tool": "create_ticket",
                              "why": "compensated before"}]
    assert world.truth()["payment_intents"][0]["status"] == "requires_capture"


def test_a_confirmed_row_with_no_compensation_stored_fails_its_unwind(
        saga_log: SagaLog, registry: Registry) -> None:
    """A row written without its compensation (by a writer older than R6's check) cannot be
    undone: the unwind says so, calls nothing for it, and goes on to the older step."""
    run = saga_log.begin_run("r12").run
    for idx, compensation in enumerate([{"tool": "close_ticket", "args": {}}, None]):
        saga_log.record_intent("r12", run.owner_epoch, idx, tool="create_ticket",
                               tool_class="compensatable",
                               key=step_key("r12", idx, "create_ticket"), args=TICKET,
                               compensation=compensation, audience=["support_team"])
        saga_log.record_outcome("r12", run.owner_epoch, idx, StepStatus.CONFIRMED)
    saga_log.record_compensation("r12", run.owner_epoch, 0, CompensationStatus.DONE,
                                 compensated=True)
    report = unwind_run(saga_log, registry, "r12", "job", recheck_pause_s=0.01)
    assert not report.settled and report.compensated == []
    assert report.failed == [{"step_idx": 1, "tool": "create_ticket",
                              "why": "no compensation stored in the row"}]
    assert report.skipped == [{"step_idx": 0, "tool": "create_ticket",
                               "why": "compensated before"}]
    assert statuses(saga_log, "r12") == [("create_ticket", "COMPENSATED", "DONE"),
                                         ("create_ticket", "CONFIRMED", None)]


def cancel_requests(world: World) -> list[Exchange]:
    return [e for e in world.exchanges()
            if e.method == "POST" and e.path.endswith("/cancel")]


def test_a_compensation_runs_under_its_own_key_and_its_answer_is_kept(
        world: World, dispatcher: SagaService, saga_log: SagaLog, registry: Registry) -> None:
    """R8: the compensation's key is derived from the run, the step and the tool; the row keeps
    it and what the compensation answered; the report names the step, its compensation, the
    effect undone and the correction."""
    dispatcher.begin_run("r13")
    charged = dispatcher.dispatch("r13", "charge_card", CHARGE)
    report = unwind_run(saga_log, registry, "r13", "job", recheck_pause_s=0.01)
    key = compensation_key("r13", 0, "charge_card")
    assert report.compensated == [{"step_idx": 0, "tool": "charge_card",
                                   "compensation": "cancel_or_refund_payment",
                                   "ref": charged.external_ref, "correction": "Silent"}]
    [cancel] = cancel_requests(world)
    assert cancel.header("Idempotency-Key") == key
    row = saga_log.step("r13", 0)
    assert row is not None and (row.status, row.comp_status, row.comp_key) == (
        "COMPENSATED", "DONE", key)
    [intent] = world.truth()["payment_intents"]
    assert row.comp_result is not None and row.comp_result["id"] == intent["id"]
    assert row.comp_result["status"] == intent["status"] == "canceled"


def test_a_rejected_compensation_keeps_why_in_its_row_and_its_report(
        world: World, dispatcher: SagaService, saga_log: SagaLog, registry: Registry) -> None:
    dispatcher.begin_run("r14")
    dispatcher.dispatch("r14", "charge_card", CHARGE)
    world.faults.add(Fault("POST", "/v1/payment_intents/*/cancel", "reject", status=400))
    report = unwind_run(saga_log, registry, "r14", "job", recheck_pause_s=0.01)
    [failed] = report.failed
    why = failed["why"]
    assert failed == {"step_idx": 0, "tool": "charge_card",
                      "compensation": "cancel_or_refund_payment", "why": why}
    assert why == ("stripe cancel payment intent: InvalidRequestError: Rejected by an "
                   "injected fault.")
    row = saga_log.step("r14", 0)
    assert row is not None and (row.comp_status, row.comp_key, row.error) == (
        "FAILED", compensation_key("r14", 0, "charge_card"),
        f"compensation cancel_or_refund_payment rejected: {why}")


def test_a_compensation_with_an_unknown_outcome_is_pending_and_logged(
        world: World, dispatcher: SagaService, saga_log: SagaLog, registry: Registry,
        caplog: pytest.LogCaptureFixture) -> None:
    dispatcher.begin_run("r15")
    dispatcher.dispatch("r15", "charge_card", CHARGE)
    world.faults.add(Fault("POST", "/v1/payment_intents/*/cancel", "commit_then_504", on_call=1))
    with caplog.at_level(logging.INFO, logger="agentsaga.saga.unwind"):
        report = unwind_run(saga_log, registry, "r15", "job", recheck_pause_s=0.01)
    [pending] = report.pending
    detail = pending["why"].removeprefix("OutcomeUnknown: ")
    assert pending == {"step_idx": 0, "tool": "charge_card",
                       "compensation": "cancel_or_refund_payment",
                       "why": f"OutcomeUnknown: {detail}"}
    assert "HTTP response code was 504" in detail
    [logged] = [r for r in caplog.records if r.name == "agentsaga.saga.unwind"]
    assert (logged.levelno, logged.getMessage()) == (
        logging.INFO, f"compensation cancel_or_refund_payment outcome unknown: {detail}")
    key = compensation_key("r15", 0, "charge_card")
    assert (logged.run_id, logged.step, logged.tool, logged.key) == (  # type: ignore[attr-defined]
        "r15", 0, "cancel_or_refund_payment", key)


@pytest.mark.allow_effect_warnings("a stored compensation that cannot be called is the test")
def test_a_stored_compensation_that_cannot_run_is_reported_and_the_unwind_goes_on(
        saga_log: SagaLog, registry: Registry, caplog: pytest.LogCaptureFixture) -> None:
    """Rows whose compensation is not the one their tool declares (a compensation naming a tool
    this process does not have, one whose arguments the tool does not take) fail with why,
    never called: a person decides (NEEDS_HUMAN); the steps before them are still unwound."""
    run = saga_log.begin_run("r16").run
    stored = [{"tool": "close_ticket", "args": {"by_key": "nothing"}},
              {"tool": "no_such_tool", "args": {}},
              {"tool": "close_ticket", "args": {"colour": "blue"}}]
    for idx, compensation in enumerate(stored):
        saga_log.record_intent("r16", run.owner_epoch, idx, tool="create_ticket",
                               tool_class="compensatable",
                               key=step_key("r16", idx, "create_ticket"), args=TICKET,
                               compensation=compensation, audience=["support_team"])
        saga_log.record_outcome("r16", run.owner_epoch, idx, StepStatus.CONFIRMED)
    saga_log.record_compensation("r16", run.owner_epoch, 0, CompensationStatus.DONE,
                                 compensated=True)
    with pytest.raises(UnknownTool) as unknown:
        registry.get("no_such_tool")
    with caplog.at_level(logging.INFO, logger="agentsaga.saga.unwind"):
        report = unwind_run(saga_log, registry, "r16", "job", recheck_pause_s=0.01)
    def why(step_idx: int, stored: str) -> str:
        built = registry.get("create_ticket").build_compensation(
            TICKET, step_key("r16", step_idx, "create_ticket"))
        assert built is not None
        declared = f"close_ticket {json.dumps(built.args, sort_keys=True, separators=(',', ':'))}"
        return (f"needs a person: compensation {stored.split()[0]} not run: the stored "
                "compensation is not the one tool 'create_ticket' declares for the step's "
                f"arguments (stored: {stored}; declared: {declared})")

    assert "no_such_tool" in str(unknown.value)
    assert report.pending == []
    assert report.failed == [
        {"step_idx": 2, "tool": "create_ticket", "compensation": "close_ticket",
         "why": why(2, 'close_ticket {"colour":"blue"}')},
        {"step_idx": 1, "tool": "create_ticket", "compensation": "no_such_tool",
         "why": why(1, "no_such_tool {}")}]
    assert [w["step_idx"] for w in report.waiting] == [2, 1] and report.needs_human
    assert report.skipped == [{"step_idx": 0, "tool": "create_ticket",
                               "why": "compensated before"}]
    assert [r for r in caplog.records if r.name == "agentsaga.saga.unwind"] == []
    step = saga_log.step("r16", 2)
    assert step is not None and (step.comp_status, step.error) == (
        CompensationStatus.FAILED, why(2, 'close_ticket {"colour":"blue"}'))


def test_references_in_a_compensations_arguments_become_the_steps_external_ids() -> None:
    refs = {"k1": "T-1", "k2": None}
    args = {"tickets": [{"$ref": "k1"}, "as is", {"$ref": "k2"}, [{"$ref": "k1"}]],
            "payment": {"$ref": "k9"}, "nested": {"by": {"$ref": "k1"}, "n": 1},
            "not_a_ref": {"$ref": "k1", "also": 2}}
    assert resolve_refs(args, refs) == {
        "tickets": ["T-1", "as is", None, ["T-1"]], "payment": None,
        "nested": {"by": "T-1", "n": 1}, "not_a_ref": {"$ref": "k1", "also": 2}}


def test_each_move_of_a_compensation_is_counted_by_tool_and_state(
        pg: str, registry: Registry, traced: Traced) -> None:
    """The store's telemetry hooks (as the sidecar and the Jobs install them): the compensation
    counted as intended then sent, and the step as COMPENSATED."""
    with SagaLog(pg, min_size=1, max_size=2, hooks=telemetry.TelemetryHooks()).open() as log_:
        service = SagaService(log_, registry, Settings(recheck_pause_s=0.05))
        service.begin_run("r17")
        service.dispatch("r17", "charge_card", CHARGE)
        assert unwind_run(log_, registry, "r17", "job", recheck_pause_s=0.01).settled
    compensations = traced.counted("agentsaga.compensations")
    assert {labels: n for labels, n in compensations.items() if n} == {
        (("agentsaga.compensation.state", "intended"), ("agentsaga.tool", "charge_card")): 1,
        (("agentsaga.compensation.state", "sent"), ("agentsaga.tool", "charge_card")): 1}
    outcomes = traced.counted("agentsaga.step.outcomes")
    assert outcomes[(("agentsaga.status", "COMPENSATED"), ("agentsaga.tool", "charge_card"))] == 1


def test_a_compensation_that_answers_nothing_is_done_with_no_result(pg: str) -> None:
    """A compensating tool may return nothing (None): the step is COMPENSATED, its compensation
    DONE with no result kept."""
    notes: dict[str, str] = {}
    registry = Registry()

    @registry.tool(cls="irreversible", audience=["agent"], lookup=NO_LOOKUP)
    def drop_note(by_key: str, idempotency_key: str) -> None:
        notes.pop(by_key, None)

    @registry.tool(cls="compensatable", audience=["agent"],
                   compensate=lambda args, key: Compensation("drop_note", {"by_key": key}),
                   lookup=lambda key: {"id": key} if key in notes else None)
    def make_note(text: str, idempotency_key: str) -> dict[str, str]:
        notes[idempotency_key] = text
        return {"id": idempotency_key}

    with SagaLog(pg, min_size=1, max_size=2).open() as saga_log:
        service = SagaService(saga_log, registry, Settings(recheck_pause_s=0.01))
        service.begin_run("r18")
        assert service.dispatch("r18", "make_note", {"text": "hi"}).outcome == "CONFIRMED"
        report = unwind_run(saga_log, registry, "r18", "job", recheck_pause_s=0.01)
        row = saga_log.step("r18", 0)
    assert report.settled and [c["compensation"] for c in report.compensated] == ["drop_note"]
    assert row is not None and (row.status, row.comp_status, row.comp_result) == (
        "COMPENSATED", "DONE", None)
    assert notes == {}
