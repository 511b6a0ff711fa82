"""R7 in time, on the world and real Postgres: nothing settled as "never happened" while it
still could have; what a late call saw is kept; the log keeps what was first sent.

Waits have a condition and a deadline: each loop re-asks the harness, which decides by the
database's clock, and sleeps only the retry-after the harness itself answered. The contracts are
made small through configuration (`AGENTSAGA_TIME_CONTRACTS`) so the real waits stay short.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentsaga.calls import DispatchResult
from agentsaga.cli.job_commands import NOT_YET_CERTAIN
from agentsaga.connectors.tools import register_all
from agentsaga.errors import Fenced
from agentsaga.keys import step_key
from agentsaga.saga.registry import Registry
from agentsaga.saga.resolution import unwind_run
from agentsaga.saga.resolution_report import ResolutionReport
from agentsaga.service.saga_service import SagaService
from agentsaga.settings import Settings
from agentsaga.states import DispatchOutcome, StepStatus
from agentsaga.store import SagaLog
from agentsaga_lab.demo.world import connector_env
from agentsaga_lab.world import Fault, World
from sagatest.cli_tools import agentsaga

TICKET = {"summary": "Refund for order 1182", "order_id": "1182"}
REWORDED = {"summary": "Refund order #1182 (customer asked twice)", "order_id": "1182"}
CHARGE = {"customer_id": "cus_1", "amount": 1500, "order_id": "1182"}


@pytest.fixture
def saga_log(pg: str) -> Iterator[SagaLog]:
    log = SagaLog(pg, min_size=1, max_size=6).open()
    yield log
    log.close()


def tools(world: World, contracts: dict[str, dict[str, float]], *,
          timeout_s: float = 2.0) -> tuple[Registry, dict[str, str]]:
    env = {**connector_env(world.url, timeout_s=timeout_s),
           "AGENTSAGA_TIME_CONTRACTS": json.dumps(contracts)}
    return register_all(Registry(), env), env


def until_settled(call: Any, *, within_s: float = 30.0) -> DispatchResult:
    """Call again after each retry-after the harness gives, until it is not UNKNOWN."""
    end = time.monotonic() + within_s
    answer: DispatchResult = call()
    while answer.outcome == DispatchOutcome.UNKNOWN and answer.retry_after_s is not None:
        assert time.monotonic() < end, f"still unknown after {within_s}s: {answer.message}"
        time.sleep(answer.retry_after_s + 0.05)
        answer = call()
    return answer


def waiting(log: list[float], then_release: Fault | None = None) -> Any:
    """The unwind's wait for a deadline (the product's own pause), noted; a held call is let
    go once the unwind waits for it."""
    def wait(seconds: float, report: ResolutionReport) -> None:
        log.append(seconds)
        if then_release is not None:
            then_release.release()
        time.sleep(seconds)
    return wait


def test_jira_lag_beyond_the_recheck_never_doubles_a_ticket(world: World,
                                                            saga_log: SagaLog) -> None:
    """Jira creates, then answers 504; its search lags 4 s; the re-check pause is 0.5 s. The
    agent calls again, same and reworded: never a second ticket; the unwind closes the one."""
    registry, _ = tools(world, {"create_ticket": {"call_timeout_s": 1.0,
                                                  "visible_within_s": 4.0}}, timeout_s=1.0)
    service = SagaService(saga_log, registry, Settings(recheck_pause_s=0.5))
    service.begin_run("jira-lag")
    world.set_search_lag(4.0)
    world.faults.add(Fault("POST", "/rest/api/3/issue", "commit_then_504", on_call=1))

    first = service.dispatch("jira-lag", "create_ticket", TICKET)
    assert first.outcome == DispatchOutcome.UNKNOWN and first.retry_after_s is not None
    again = service.dispatch("jira-lag", "create_ticket", TICKET)
    assert again.outcome == DispatchOutcome.UNKNOWN and again.retry_after_s is not None
    reworded = service.dispatch("jira-lag", "create_ticket", REWORDED)
    assert reworded.outcome == DispatchOutcome.UNKNOWN
    assert "in " in reworded.message and "or later" in reworded.message

    final = until_settled(lambda: service.dispatch("jira-lag", "create_ticket", REWORDED))
    key = step_key("jira-lag", 0, "create_ticket")
    labelled = [t for t in world.truth()["tickets"] if f"saga-{key}" in t["labels"]]
    assert final.outcome == DispatchOutcome.CONFIRMED and len(labelled) == 1
    assert final.external_ref == labelled[0]["key"]
    [step] = saga_log.steps("jira-lag")
    assert step.args == TICKET  # the log keeps what was first sent

    report = unwind_run(saga_log, registry, "jira-lag", "job", recheck_pause_s=0.5)
    assert report.settled
    [ticket] = [t for t in world.truth()["tickets"] if f"saga-{key}" in t["labels"]]
    assert ticket["state"] == "closed"


def test_unwind_while_a_charge_is_on_the_wire_waits_for_its_deadline(
        world: World, saga_log: SagaLog) -> None:
    """`unwind` starts while the card network holds a charge (then commits it): the unwind does
    not report the run unwound before the call's deadline; in the end no authorisation is left
    open and nothing was compensated twice."""
    registry, _ = tools(world, {"charge_card": {"visible_within_s": 0.2}}, timeout_s=3.0)
    sidecar = SagaService(saga_log, registry, Settings(recheck_pause_s=0.05))
    sidecar.begin_run("held")
    # the card network holds the charge until the unwind waits for its deadline: the unwind
    # comes while it is on the wire on every run, not only when it happens to come early
    held = world.faults.add(Fault("POST", "/v1/payment_intents", "hold", on_call=1))
    outcome: list[BaseException | DispatchResult] = []

    def agent() -> None:
        try:
            outcome.append(sidecar.dispatch("held", "charge_card", CHARGE))
        except BaseException as exc:  # the sidecar is fenced when the call returns
            outcome.append(exc)

    thread = threading.Thread(target=agent)
    thread.start()
    end = time.monotonic() + 10
    while not saga_log.steps("held"):  # the INTENDED row is written, the call on the wire
        assert time.monotonic() < end
        time.sleep(0.01)

    waits: list[float] = []
    report = unwind_run(saga_log, registry, "held", "unwind", recheck_pause_s=0.05,
                        wait=waiting(waits, then_release=held))
    thread.join(timeout=10)
    when = saga_log.certainty("held", 0)
    assert when is not None and when.deadline is not None
    assert waits, "the unwind must have waited for the call's deadline"
    assert report.settled and report.state == "unwound"
    ended = saga_log.require_run("held").ended_at
    assert ended is not None and ended >= when.deadline  # unwound only past the call's deadline
    assert isinstance(outcome[0], Fenced)
    truth = world.truth()
    [intent] = truth["payment_intents"]
    assert intent["status"] == "canceled"  # no authorisation left open
    assert truth["calls"].get("POST /v1/payment_intents/{id}/cancel", 0) == 1
    [obs] = saga_log.observations("held")  # what the fenced call saw is kept
    assert obs.outcome == StepStatus.CONFIRMED and obs.external_ref == intent["id"]
    again = unwind_run(saga_log, registry, "held", "unwind2", recheck_pause_s=0.05)
    assert again.settled and world.truth()["calls"].get(
        "POST /v1/payment_intents/{id}/cancel", 0) == 1  # nothing compensated twice


@pytest.mark.allow_effect_warnings("the late effect it provokes re-opens a settled step")
def test_a_fenced_call_that_confirms_late_is_recorded_and_compensated(
        world: World, saga_log: SagaLog) -> None:
    """Even when a tool's declared deadline is too short (the call outlives it), a settled
    NOT_EXECUTED step whose effect a fenced call later observes is re-opened and unwound."""
    registry, _ = tools(world, {"charge_card": {"call_timeout_s": 0.1, "visible_within_s": 0.0}},
                        timeout_s=30.0)
    sidecar = SagaService(saga_log, registry, Settings(recheck_pause_s=0.05))
    sidecar.begin_run("late")
    # held on the wire until the other owner has settled the row: the call confirms late
    held = world.faults.add(Fault("POST", "/v1/payment_intents", "hold", on_call=1))
    outcome: list[BaseException | DispatchResult] = []
    thread = threading.Thread(target=lambda: _record(outcome, sidecar, "late"))
    thread.start()
    end = time.monotonic() + 10
    while not saga_log.steps("late"):
        assert time.monotonic() < end
        time.sleep(0.01)
    # another owner settles the row as it stands (the misdeclared deadline has passed) ...
    first = unwind_run(saga_log, registry, "late", "job-1", recheck_pause_s=0.05,
                       wait=waiting([]))
    assert [s.status for s in saga_log.steps("late")] == [StepStatus.NOT_EXECUTED]
    assert first.settled
    held.release()
    thread.join(timeout=30)
    assert isinstance(outcome[0], Fenced)  # ... then the call confirms, fenced
    [obs] = saga_log.observations("late")
    assert obs.outcome == StepStatus.CONFIRMED and obs.key == step_key("late", 0, "charge_card")
    report = unwind_run(saga_log, registry, "late", "job-2", recheck_pause_s=0.05)
    assert report.settled and any(r.get("was") == "NOT_EXECUTED" for r in report.reconciled)
    [intent] = world.truth()["payment_intents"]
    assert intent["status"] == "canceled"
    assert [s.status for s in saga_log.steps("late")] == [StepStatus.COMPENSATED]


def _record(outcome: list[BaseException | DispatchResult], service: SagaService,
            run_id: str) -> None:
    try:
        outcome.append(service.dispatch(run_id, "charge_card", CHARGE))
    except BaseException as exc:
        outcome.append(exc)


def test_a_reworded_retry_keeps_the_first_arguments_and_logs_the_attempt(
        world: World, saga_log: SagaLog, pg: str, tmp_path: Path) -> None:
    registry, _ = tools(world, {"charge_card": {"call_timeout_s": 0.2,
                                                "visible_within_s": 0.1}})
    service = SagaService(saga_log, registry, Settings(recheck_pause_s=0.05))
    service.begin_run("reworded")
    world.faults.add(Fault("POST", "/v1/payment_intents", "fail_before_commit_502", on_call=1))
    assert service.dispatch("reworded", "charge_card", CHARGE).outcome == DispatchOutcome.UNKNOWN
    bigger = {**CHARGE, "amount": 1650}
    final = until_settled(lambda: service.dispatch("reworded", "charge_card", bigger))
    assert final.outcome == DispatchOutcome.CONFIRMED
    [intent] = world.truth()["payment_intents"]
    [step] = saga_log.steps("reworded")
    assert step.args["amount"] == 1500  # what was first sent
    assert step.result["amount"] == intent["amount"] == 1650  # what the real system gave
    [attempt] = saga_log.attempts("reworded")
    assert attempt.attempt == 2 and attempt.args["amount"] == 1650

    shown = agentsaga("log", "--run", "reworded", "--dsn", pg, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert '"amount": 1500' in shown.stdout and "attempt 1 (first sent)" in shown.stdout
    assert "attempt 2" in shown.stdout and '"amount": 1650' in shown.stdout


def test_unwind_no_wait_exits_with_its_own_code_and_says_when(
        world: World, saga_log: SagaLog, pg: str, tmp_path: Path) -> None:
    contracts = {"create_ticket": {"call_timeout_s": 600.0, "visible_within_s": 0.0}}
    registry, env = tools(world, contracts)
    service = SagaService(saga_log, registry, Settings(recheck_pause_s=0.05))
    service.begin_run("nowait")
    world.faults.add(Fault("POST", "/rest/api/3/issue", "fail_before_commit_502", on_call=1))
    assert service.dispatch("nowait", "create_ticket", TICKET).outcome == "UNKNOWN"
    done = agentsaga("unwind", "--run", "nowait", "--no-wait", "--dsn", pg,
                     "--tools", "agentsaga.connectors.tools", cwd=tmp_path,
                     env={**env, "AGENTSAGA_RECHECK_PAUSE_S": "0.05"})
    assert done.returncode == NOT_YET_CERTAIN, done.stdout + done.stderr
    assert "again after" in done.stderr and "--run nowait" in done.stderr
    assert saga_log.require_run("nowait").state == "unwinding"
