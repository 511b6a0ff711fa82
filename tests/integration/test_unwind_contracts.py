"""Unwind runs only the compensation a step's tool declares (`agentsaga.saga.contracts`): each
intent records the version of its tool's contract; unwind rebuilds the compensation from the
registry's current declaration and the step's arguments and calls nothing else. A compensation
rewritten in Postgres (as the security review did, with a superuser's rights), or a deploy that
changed how the tool undoes its effect, leaves the step to a person (NEEDS_HUMAN, with why);
a deploy that changed only the tool's timing or lookup still compensates. Ground truth: the
ledger's rows and the stand-in `payout` tool's calls (real Postgres)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from agentsaga import NO_LOOKUP, Compensation, Registry
from agentsaga.saga import contracts
from agentsaga.saga.resolution import unwind_run
from agentsaga.service.saga_service import SagaService
from agentsaga.settings import Settings
from agentsaga.states import CompensationStatus, StepStatus
from agentsaga.store import SagaLog
from sagatest import ledger_tools

CHARGE = {"customer_id": "cus_1", "amount": 1200}
PAYOUTS: list[dict[str, Any]] = []


def _payout(account: str, amount: int, idempotency_key: str) -> dict[str, Any]:
    PAYOUTS.append({"account": account, "amount": amount})
    return {"paid": account}


def deployed(charge_compensate: Any = None) -> Registry:
    """The ledger's tools and a `payout` tool; `charge_compensate`: charge_card's compensate
    function as a later deploy declares it."""
    registry = Registry()
    registry.merge(ledger_tools.build_registry())
    registry.register(_payout, cls="irreversible", name="payout", audience=["finance"],
                      lookup=NO_LOOKUP)
    if charge_compensate is not None:
        charge = registry.get("charge_card")
        registry.register(charge.fn, cls=charge.cls, audience=charge.audience_spec,
                          compensate=charge_compensate, lookup=charge.lookup)
    return registry


@pytest.fixture
def saga_log(pg: str, ledger: str) -> Iterator[SagaLog]:
    PAYOUTS.clear()
    with SagaLog(pg, min_size=1, max_size=4).open() as log:
        yield log


def _charged(saga_log: SagaLog, run_id: str) -> None:
    service = SagaService(saga_log, deployed(), Settings(recheck_pause_s=0.01),
                          sleep=lambda _: None)
    service.begin_run(run_id)
    service.dispatch(run_id, "charge_card", CHARGE)


def test_each_intent_records_its_tools_contract(saga_log: SagaLog) -> None:
    _charged(saga_log, "c1")
    [step] = saga_log.steps("c1")
    registry = deployed()
    expected, version = contracts.versioned(registry.get("charge_card"), registry, "refund")
    assert (step.contract_hash, step.contract) == (version, json.loads(json.dumps(expected)))
    assert step.contract is not None and step.contract["compensatingTool"]["name"] == "refund"


def test_a_compensation_rewritten_in_postgres_is_never_called(saga_log: SagaLog,
                                                              ledger: str) -> None:
    _charged(saga_log, "c2")
    attacker = {"tool": "payout", "args": {"account": "ATTACKER-ACCT", "amount": 99999}}
    with psycopg.connect(ledger) as conn:  # a superuser, past every grant and trigger
        conn.execute("UPDATE saga_log SET compensation = %s WHERE run_id = 'c2'",
                     (json.dumps(attacker),))

    report = unwind_run(saga_log, deployed(), "c2", recheck_pause_s=0.01)

    assert PAYOUTS == []
    [charge] = ledger_tools.effects(ledger, "charge")
    assert charge["closed"] is False  # not refunded either: a person decides what to do
    assert report.needs_human and not report.settled
    [waiting] = report.waiting
    assert waiting["step_idx"] == 0 and waiting["tool"] == "charge_card"
    assert "the stored compensation is not the one tool 'charge_card' declares" in (
        waiting["what"])
    assert 'payout {"account":"ATTACKER-ACCT","amount":99999}' in waiting["what"]
    step = saga_log.step("c2", 0)
    assert step is not None and step.status == StepStatus.CONFIRMED
    assert step.comp_status == CompensationStatus.FAILED and step.comp_key is None
    # and it stays so: the next unwind calls nothing either, the person is still asked
    again = unwind_run(saga_log, deployed(), "c2", recheck_pause_s=0.01)
    assert PAYOUTS == [] and [w["step_idx"] for w in again.waiting] == [0]


def test_a_deploy_that_changed_how_the_tool_undoes_leaves_the_step_to_a_person(
        saga_log: SagaLog, ledger: str) -> None:
    _charged(saga_log, "c3")

    def refund_twice(args: dict[str, Any], key: str) -> Compensation:
        return Compensation("refund", {"charge_key": key, "amount": int(args["amount"])})

    report = unwind_run(saga_log, deployed(refund_twice), "c3", recheck_pause_s=0.01)

    [charge] = ledger_tools.effects(ledger, "charge")
    assert charge["closed"] is False
    [waiting] = report.waiting
    assert "tool 'charge_card' declares its compensation differently since the step ran" in (
        waiting["what"])


def test_a_deploy_that_changed_only_the_tools_timing_still_compensates(
        saga_log: SagaLog, ledger: str) -> None:
    _charged(saga_log, "c4")
    registry = deployed()
    registry.override_timing({"charge_card": {"call_timeout_s": 30.0}})

    report = unwind_run(saga_log, registry, "c4", recheck_pause_s=0.01)

    assert report.settled and report.waiting == []
    [charge] = ledger_tools.effects(ledger, "charge")
    assert charge["closed"] is True
    step = saga_log.step("c4", 0)
    assert step is not None and step.status == StepStatus.COMPENSATED
