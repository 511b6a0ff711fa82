"""The Stripe stand-in, driven by the official `stripe` SDK over HTTP."""

from __future__ import annotations

import threading
import time
from typing import Any, cast

import pytest
import stripe

from agentsaga_lab.world import Fault, ManualClock, World
from sagatest.stripe_world import authorise, client
from sagatest.world_fixtures import poll_until


def only_intent(world: World) -> dict[str, Any]:
    intents = world.truth()["payment_intents"]
    assert len(intents) == 1
    intent: dict[str, Any] = intents[0]
    return intent


def test_manual_capture_authorises_then_captures(world: World) -> None:
    sc = client(world)
    pi = authorise(sc, "k-capture")
    assert isinstance(pi, stripe.PaymentIntent)
    assert (pi.status, pi.amount_capturable, pi.amount_received) == ("requires_capture", 500, 0)
    captured = sc.v1.payment_intents.capture(pi.id)
    assert (captured.status, captured.amount_received, captured.amount_capturable) == (
        "succeeded", 500, 0)
    assert only_intent(world)["status"] == "succeeded"
    assert sc.v1.payment_intents.retrieve(pi.id).status == "succeeded"


def test_cancel_releases_the_hold_and_blocks_capture(world: World) -> None:
    sc = client(world)
    pi = authorise(sc, "k-cancel")
    canceled = sc.v1.payment_intents.cancel(pi.id, params={"cancellation_reason": "abandoned"})
    assert (canceled.status, canceled.amount_capturable) == ("canceled", 0)
    with pytest.raises(stripe.InvalidRequestError) as caught:
        sc.v1.payment_intents.capture(pi.id)
    assert caught.value.code == "payment_intent_unexpected_state"
    assert caught.value.http_status == 400
    truth = only_intent(world)
    assert (truth["status"], truth["amount_capturable"], truth["amount_received"]) == (
        "canceled", 0, 0)


def test_partial_refunds_up_to_the_captured_amount(world: World) -> None:
    sc = client(world)
    pi = authorise(sc, "k-refund", amount=1000)
    sc.v1.payment_intents.capture(pi.id)
    first = sc.v1.refunds.create(params={"payment_intent": pi.id, "amount": 300},
                                 options={"idempotency_key": "k-refund-1"})
    assert isinstance(first, stripe.Refund)
    assert (first.status, first.amount, first.payment_intent) == ("succeeded", 300, pi.id)
    with pytest.raises(stripe.InvalidRequestError) as caught:
        sc.v1.refunds.create(params={"payment_intent": pi.id, "amount": 800})
    assert caught.value.code == "amount_too_large"
    rest = sc.v1.refunds.create(params={"payment_intent": pi.id})
    assert rest.amount == 700
    truth = world.truth()
    assert truth["payment_intents"][0]["amount_refunded"] == 1000
    assert [r["amount"] for r in truth["refunds"]] == [300, 700]
    assert truth["refunds"][0]["idempotency_key"] == "k-refund-1"


def test_refund_of_an_uncaptured_intent_is_refused(world: World) -> None:
    sc = client(world)
    pi = authorise(sc, "k-uncaptured")
    with pytest.raises(stripe.InvalidRequestError) as caught:
        sc.v1.refunds.create(params={"payment_intent": pi.id})
    assert caught.value.code == "payment_intent_unexpected_state"
    assert world.truth()["refunds"] == []


def test_same_key_replays_the_saved_answer_without_executing_again(world: World) -> None:
    sc = client(world)
    first = authorise(sc, "k-replay")
    second = authorise(sc, "k-replay")
    assert second.id == first.id
    headers = second.last_response.headers
    assert headers["Idempotent-Replayed"] == "true"
    assert headers["Idempotency-Key"] == "k-replay"
    assert "Idempotent-Replayed" not in first.last_response.headers
    truth = only_intent(world)
    assert truth["idempotency_keys"] == ["k-replay"]
    assert world.truth()["calls"]["POST /v1/payment_intents"] == 2


def test_same_key_with_other_parameters_is_an_idempotency_error(world: World) -> None:
    sc = client(world)
    authorise(sc, "k-mismatch", amount=500)
    with pytest.raises(stripe.IdempotencyError) as caught:
        authorise(sc, "k-mismatch", amount=700)
    assert caught.value.http_status == 400
    assert "k-mismatch" in str(caught.value.user_message)
    with pytest.raises(stripe.IdempotencyError):  # another endpoint with the same key, too
        sc.v1.refunds.create(params={"payment_intent": "pi_x"},
                             options={"idempotency_key": "k-mismatch"})
    assert only_intent(world)["amount"] == 500


def test_validation_errors_are_not_saved_under_the_key(world: World) -> None:
    sc = client(world)
    with pytest.raises(stripe.InvalidRequestError) as caught:
        sc.v1.payment_intents.create(params=cast(Any, {"amount": 500}),  # no currency: invalid
                                     options={"idempotency_key": "k-fixed"})
    assert caught.value.param == "currency"
    pi = sc.v1.payment_intents.create(params={"amount": 500, "currency": "usd"},
                                      options={"idempotency_key": "k-fixed"})
    assert pi.status == "requires_payment_method"
    assert only_intent(world)["id"] == pi.id


def test_declined_card_is_a_card_error_and_is_replayed(world: World) -> None:
    sc = client(world)
    for _ in range(2):
        with pytest.raises(stripe.CardError) as caught:
            authorise(sc, "k-declined", payment_method="pm_card_chargeDeclined")
        assert caught.value.code == "card_declined"
    assert only_intent(world)["status"] == "requires_payment_method"


def test_retry_while_the_first_request_is_in_flight_gets_409(world: World) -> None:
    sc = client(world)
    held = world.faults.add(Fault("POST", "/v1/payment_intents", "hold", on_call=1))
    first: list[Any] = []
    worker = threading.Thread(target=lambda: first.append(authorise(sc, "k-inflight")))
    worker.start()
    poll_until(lambda: world.truth()["calls"].get("POST /v1/payment_intents"))
    with pytest.raises(stripe.APIError) as caught:  # the first is held until released
        authorise(sc, "k-inflight")
    assert caught.value.http_status == 409
    assert cast(dict[str, Any], caught.value.json_body)["error"]["code"] == "idempotency_key_in_use"
    held.release()
    worker.join(timeout=30)
    assert first[0].status == "requires_capture"
    assert authorise(sc, "k-inflight").id == first[0].id
    only_intent(world)


def test_search_finds_by_metadata_only_after_the_lag() -> None:
    clock = ManualClock()
    with World(search_lag=0.4, clock=clock) as world:
        sc = client(world)
        pi = authorise(sc, "k-search")
        authorise(sc, "k-other")
        query = "metadata['saga_key']:'k-search' OR metadata[\"saga_key\"]:\"k-none\""
        assert sc.v1.payment_intents.search(params={"query": query}).data == []
        clock.advance(0.39)
        assert sc.v1.payment_intents.search(params={"query": query}).data == []
        clock.advance(0.01)
        found = sc.v1.payment_intents.search(params={"query": query}).data
        assert [p.id for p in found] == [pi.id]
        both = sc.v1.payment_intents.search(
            params={"query": "status:'requires_capture' AND amount>=500", "limit": 1})
        assert len(both.data) == 1 and both.has_more and both.next_page == "1"


def test_malformed_search_queries_are_rejected(world: World) -> None:
    sc = client(world)
    bad = [
        "metadata['k']:'a' AND status:'x' OR status:'y'",  # AND and OR mixed
        " OR ".join(f"metadata['k']:'{i}'" for i in range(11)),  # 11 clauses
        "status:succeeded",  # unquoted string
        "colour:'red'",
    ]
    for query in bad:
        with pytest.raises(stripe.InvalidRequestError) as caught:
            sc.v1.payment_intents.search(params={"query": query})
        assert caught.value.param == "query", query


def test_search_beyond_the_rate_limit_is_429(world: World, clock: ManualClock) -> None:
    world.set_search_rate(3)  # on `clock`: no token comes back while the test runs
    sc = client(world)
    for _ in range(3):
        sc.v1.payment_intents.search(params={"query": "status:'succeeded'"})
    with pytest.raises(stripe.RateLimitError) as caught:
        sc.v1.payment_intents.search(params={"query": "status:'succeeded'"})
    assert caught.value.http_status == 429


def test_list_is_read_after_write_consistent(world: World) -> None:
    world.set_search_lag(60)
    sc = client(world)
    since = int(time.time()) - 5
    mine = authorise(sc, "k-list", customer="cus_A")
    authorise(sc, "k-list-b", customer="cus_B")
    listed = sc.v1.payment_intents.list(params={"customer": "cus_A", "created": {"gte": since}})
    assert [p.id for p in listed.data] == [mine.id]
    assert listed.data[0].metadata["saga_key"] == "k-list"
    assert sc.v1.payment_intents.list(params={"created": {"gt": since + 3600}}).data == []
