"""What Stripe refuses reaches the agent as FAILED naming the reason, through the real sidecar,
the Stripe connector and the SDK against the world (R5: a 4xx is FAILED, nothing happened)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest
import stripe

from agentsaga.client import Refused, SagaClient, ToolFailed
from agentsaga.saga import pivot
from agentsaga.store import SagaLog
from agentsaga_lab.demo.world import connector_env
from agentsaga_lab.world import World
from sagatest.sidecar_fixtures import SidecarProcess

TOOLS = "agentsaga.connectors.tools"


@pytest.fixture
def agent(world: World, pg: str,
          sidecar_factory: Callable[..., SidecarProcess]) -> SagaClient:
    return sidecar_factory(pg, TOOLS, env=connector_env(world.url)).client()


@pytest.fixture
def saga_log(pg: str) -> Iterator[SagaLog]:
    log = SagaLog(pg, min_size=1, max_size=2).open()
    yield log
    log.close()


def failed_rows(log: SagaLog, run_id: str) -> list[tuple[str, str]]:
    return [(s.tool, s.status) for s in log.steps(run_id) if s.status == "FAILED"]


@pytest.mark.parametrize(("args", "minimum"), [
    # a currency Stripe does not take never gets this far either (test_typed_arguments.py)
    ({"currency": "huf"}, "at least 17500 for huf (175.00 huf, Stripe's minimum charge), got 500"),
    ({"amount": 30}, "at least 50 for usd ($0.50 usd, Stripe's minimum charge), got 30"),
    ({"amount": 49, "currency": "jpy"}, "at least 50 for jpy (¥50 jpy, Stripe's minimum charge)"),
])
def test_a_charge_below_stripes_minimum_is_refused_before_the_intent(
        world: World, agent: SagaClient, saga_log: SagaLog, args: dict[str, object],
        minimum: str) -> None:
    """Stripe would refuse it (amount_too_small): it is refused before anything is written or
    sent, naming the minimum of the currency."""
    agent.begin_run("r1")
    with pytest.raises(Refused) as caught:
        agent.dispatch("r1", "charge_card", {"customer_id": "cus_1", "amount": 500, **args})
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert f"tool 'charge_card': argument 'amount' must be {minimum}" in caught.value.details()
    assert saga_log.steps("r1") == []
    assert world.truth()["payment_intents"] == []
    assert world.truth()["calls"].get("POST /v1/payment_intents", 0) == 0


def test_a_charge_stripe_refuses_is_failed_with_the_reason(
        world: World, agent: SagaClient, saga_log: SagaLog) -> None:
    """A declined card: Stripe answers 402, nothing is authorised, the agent reads why."""
    agent.begin_run("r1")
    with pytest.raises(ToolFailed) as caught:
        agent.dispatch("r1", "charge_card", {"customer_id": "cus_1", "amount": 500,
                                             "payment_method": "pm_card_chargeDeclined"})
    assert "card_declined" in str(caught.value) and "Your card was declined" in str(caught.value)
    assert failed_rows(saga_log, "r1") == [("charge_card", "FAILED")]
    assert [pi["status"] for pi in world.truth()["payment_intents"]] == [
        "requires_payment_method"]  # nothing authorised


def test_capture_of_a_canceled_hold_and_an_over_refund_are_failed_with_the_reason(
        world: World, agent: SagaClient, saga_log: SagaLog) -> None:
    agent.begin_run("r2")
    hold = agent.dispatch("r2", "charge_card", {"customer_id": "cus_1", "amount": 500})
    paid = agent.dispatch("r2", "charge_card", {"customer_id": "cus_1", "amount": 800})
    plan: list[dict[str, Any]] = [
        {"tool": "capture_payment", "args": {"payment_intent": hold["id"]}},
        {"tool": "capture_payment", "args": {"payment_intent": paid["id"]}},
        {"tool": "cancel_or_refund_payment", "args": {"payment": paid["id"], "amount": 900}}]
    staged = agent.reach_pivot("r2", plan)
    pivot.record_decision(saga_log, "r2", staged.plan_hash, "Approved", "alice")
    # meanwhile someone cancels the hold in Stripe (as an expired authorisation is canceled)
    stripe.StripeClient("sk_test_x", base_addresses={"api": world.url}).v1.payment_intents.cancel(
        hold["id"])
    with pytest.raises(ToolFailed) as capture:
        agent.dispatch("r2", "capture_payment", plan[0]["args"])
    assert ("(code payment_intent_unexpected_state): This PaymentIntent could not be captured "
            "because it has a status of canceled") in str(capture.value)
    agent.dispatch("r2", "capture_payment", plan[1]["args"])
    with pytest.raises(ToolFailed) as refund:
        agent.dispatch("r2", "cancel_or_refund_payment", plan[2]["args"])
    assert ("(code amount_too_large, param amount): Refund amount ($9.00 usd) is greater than "
            "unrefunded amount on charge ($8.00 usd)") in str(refund.value)
    assert failed_rows(saga_log, "r2") == [("capture_payment", "FAILED"),
                                           ("cancel_or_refund_payment", "FAILED")]
    truth = world.truth()
    assert truth["refunds"] == []
    assert {p["id"]: p["status"] for p in truth["payment_intents"]} == {
        hold["id"]: "canceled", paid["id"]: "succeeded"}
