"""The Stripe connector through the real `stripe` SDK against the world's Stripe stand-in."""

from __future__ import annotations

import pytest

from agentsaga.connectors.config import HttpSettings, StripeConfig
from agentsaga.connectors.stripe import StripeConnector
from agentsaga.errors import OutcomeUnknown, Rejected
from agentsaga_lab.world import Fault, ManualClock, World

PI = "/v1/payment_intents"


@pytest.fixture
def stripe_conn(world: World) -> StripeConnector:
    return StripeConnector(StripeConfig("sk_test_x", world.url),
                           HttpSettings(timeout_s=2.0, search_rate=1000.0))


def test_charge_authorises_with_key_in_header_and_metadata(world: World,
                                                           stripe_conn: StripeConnector) -> None:
    effect = stripe_conn.charge_card("cus_1", 500, "k1", reason="fee")
    [pi] = world.truth()["payment_intents"]
    assert effect.ref == pi["id"]
    assert pi["status"] == "requires_capture" and pi["amount_capturable"] == 500
    assert pi["metadata"]["saga_key"] == "k1" and pi["idempotency_keys"] == ["k1"]


def test_same_key_twice_is_one_payment_intent(world: World, stripe_conn: StripeConnector) -> None:
    a = stripe_conn.charge_card("cus_1", 500, "k1")
    b = stripe_conn.charge_card("cus_1", 500, "k1")
    assert a.ref == b.ref
    assert len(world.truth()["payment_intents"]) == 1


@pytest.mark.parametrize("kind", ["commit_then_504", "commit_then_reset"])
def test_unknown_after_commit_then_lookup_finds_it(world: World, stripe_conn: StripeConnector,
                                                   kind: str) -> None:
    world.faults.add(Fault("POST", PI, kind, on_call=1))  # type: ignore[arg-type]
    with pytest.raises(OutcomeUnknown):
        stripe_conn.charge_card("cus_1", 500, "k1")
    [pi] = world.truth()["payment_intents"]
    found = stripe_conn.find("k1")
    assert found is not None and found.ref == pi["id"]


def test_declined_card_and_invalid_amount_are_rejected(world: World,
                                                       stripe_conn: StripeConnector) -> None:
    with pytest.raises(Rejected):
        stripe_conn.charge_card("cus_1", 500, "k1", payment_method="pm_card_chargeDeclined")
    with pytest.raises(Rejected):
        stripe_conn.charge_card("cus_1", 10, "k2")
    assert all(pi["status"] != "requires_capture" for pi in world.truth()["payment_intents"])


def test_lagging_index_hides_then_shows(world: World, clock: ManualClock,
                                       stripe_conn: StripeConnector) -> None:
    world.set_search_lag(0.3)
    stripe_conn.charge_card("cus_1", 500, "k1")
    assert stripe_conn.find("k1") is None
    clock.advance(0.3)  # the index caught up
    assert stripe_conn.find("k1") is not None


def test_batched_lookup_backs_off_on_429(world: World, clock: ManualClock) -> None:
    """The world's 2/s limit and the connector's back-off run on one ManualClock: a back-off
    moves it, so the 429s and the retries are the same on every machine."""
    stripe_conn = StripeConnector(StripeConfig("sk_test_x", world.url),
                                  HttpSettings(timeout_s=2.0, search_rate=1000.0),
                                  clock=clock, sleep=clock.advance)
    keys = [f"k{i}" for i in range(25)]
    for key in keys:
        stripe_conn.charge_card("cus_1", 500, key)
    world.set_search_rate(2)
    start = clock()
    found = stripe_conn.find_many(keys + ["missing"])
    assert sorted(found) == sorted(keys)
    calls = world.truth()["calls"]["GET /v1/payment_intents/search"]
    assert calls > 3  # three queries of at most 10 clauses, and retries after the 429s
    assert clock() - start >= 1.0  # the third query waited out the one-second window


def test_cancel_then_repeat_is_one_cancel_and_no_refund(world: World,
                                                        stripe_conn: StripeConnector) -> None:
    pi = stripe_conn.charge_card("cus_1", 500, "k1")
    first = stripe_conn.cancel_or_refund_payment("c1", payment=pi.ref)
    again = stripe_conn.cancel_or_refund_payment("c1", payment=pi.ref)
    assert first.result["action"] == "canceled" and again.result["action"] == "already_canceled"
    truth = world.truth()
    assert [p["status"] for p in truth["payment_intents"]] == ["canceled"]
    assert truth["refunds"] == []


def test_captured_payment_is_refunded_once_under_its_key(world: World,
                                                         stripe_conn: StripeConnector) -> None:
    pi = stripe_conn.charge_card("cus_1", 500, "k1")
    stripe_conn.capture_payment(str(pi.ref), "cap1")
    assert stripe_conn.find_capture("cap1") is not None
    stripe_conn.cancel_or_refund_payment("c1", charge_key="k1")
    stripe_conn.cancel_or_refund_payment("c1", payment=pi.ref)
    truth = world.truth()
    assert len(truth["refunds"]) == 1
    assert truth["payment_intents"][0]["amount_refunded"] == 500


def test_same_key_with_other_parameters_is_unknown_never_failed(
        world: World, stripe_conn: StripeConnector) -> None:
    """A reworded retry after the index lagged past the re-check: Stripe's idempotency_error
    says the key ran before, so the charge may exist: UNKNOWN, not FAILED (R5)."""
    stripe_conn.charge_card("cus_1", 500, "k1", reason="Re-shipping fee for order 1182")
    with pytest.raises(OutcomeUnknown, match="used by an earlier request"):
        stripe_conn.charge_card("cus_1", 500, "k1", reason="Order #1182 reship fee")
    assert len(world.truth()["payment_intents"]) == 1


def test_undoing_a_charge_whose_capture_was_refunded_refunds_nothing_more(
        world: World, stripe_conn: StripeConnector) -> None:
    """Unwind compensates capture_payment (refund) and then charge_card on the same
    PaymentIntent: the second sees the full refund and is done (R8)."""
    charge = stripe_conn.charge_card("cus_1", 500, "k1")
    stripe_conn.capture_payment(str(charge.ref), "k2")
    stripe_conn.cancel_or_refund_payment("c2", payment=str(charge.ref))
    second = stripe_conn.cancel_or_refund_payment("c1", payment=str(charge.ref))
    assert second.result["action"] == "already_refunded"
    assert [r["amount"] for r in world.truth()["refunds"]] == [500]
