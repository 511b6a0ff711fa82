"""The Stripe stand-in and the Stripe connector held to Stripe's OpenAPI description
(sagatest/contracts/stripe.openapi.json under tests/support, cut from stripe/openapi by
tools/extract_openapi.py).

Requests are captured at the stand-in's HTTP edge as the real `stripe` SDK sent them; every
request and every answer, errors included, must be one the description allows. The stand-in
must refuse what Stripe refuses, with Stripe's error shape, and the connector must turn each
refusal into FAILED naming the reason.
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest
import stripe

from agentsaga.connectors.config import HttpSettings, StripeConfig
from agentsaga.connectors.stripe import LIST_PAGE, StripeConnector
from agentsaga.errors import OutcomeUnknown, Rejected
from agentsaga.saga.registry import LookupContext
from agentsaga_lab.world import ManualClock, World
from agentsaga_lab.world.exchanges import Exchange
from sagatest.contracts.openapi import Contract

CONTRACT = Contract.load("stripe")


@pytest.fixture
def conn(world: World) -> StripeConnector:
    return StripeConnector(StripeConfig("sk_test_x", world.url),
                           HttpSettings(timeout_s=5.0, search_rate=1000.0))


@pytest.fixture
def sdk(world: World) -> stripe.StripeClient:
    return stripe.StripeClient("sk_test_x", base_addresses={"api": world.url},
                               max_network_retries=0)


def stripe_exchanges(world: World) -> list[Exchange]:
    return [e for e in world.exchanges() if e.path.startswith("/v1/")]


def error_of(exchange: Exchange) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(exchange.response_body)["error"]
    return body


def test_every_request_the_connector_sends_and_every_answer_is_in_stripes_description(
        world: World, conn: StripeConnector, sdk: stripe.StripeClient) -> None:
    paid = conn.charge_card("cus_1", 1500, "k-paid", reason="Re-shipping fee", order_id="1182")
    conn.capture_payment(str(paid.ref), "k-capture")
    conn.cancel_or_refund_payment("k-refund", payment=str(paid.ref), amount=500)
    held = conn.charge_card("cus_1", 700, "k-held", currency="eur", receipt=True)
    conn.cancel_or_refund_payment("k-cancel", charge_key="k-held")
    assert conn.find_many(["k-paid", "k-held", "k-none"]).keys() == {"k-paid", "k-held"}
    with pytest.raises(Rejected):
        conn.charge_card("cus_1", 500, "k-declined", payment_method="pm_card_chargeDeclined")
    with pytest.raises(Rejected):
        conn.charge_card("cus_1", 10, "k-small")
    with pytest.raises(Rejected):
        conn.charge_card("cus_1", 500, "k-xxx", currency="xxx")
    with pytest.raises(Rejected):
        conn.capture_payment(str(held.ref), "k-capture-canceled")
    with pytest.raises(Rejected):
        conn.cancel_or_refund_payment("k-over", payment=str(paid.ref), amount=5000)
    with pytest.raises(OutcomeUnknown):  # same key, other parameters: idempotency_error
        conn.charge_card("cus_1", 999, "k-paid")
    with pytest.raises(Rejected):
        conn.cancel_or_refund_payment("k-missing", payment="pi_does_not_exist")
    # the list filters a reconciler may use instead of search
    sdk.v1.payment_intents.list(params={"customer": "cus_1", "created": {"gte": 0}, "limit": 3})
    sdk.v1.refunds.list(params={"payment_intent": str(paid.ref)})
    # reconcile's consistent lookups: a `created` window paged with starting_after, then a
    # retrieve by id; a capture's PaymentIntent retrieved by id
    for i in range(LIST_PAGE):
        conn.charge_card("cus_2", 500, f"k-noise-{i}")
    now = datetime.now(UTC)
    since = now - timedelta(minutes=5)
    found = conn.find_charges([LookupContext("k-paid", {}, since, now),
                               LookupContext("k-none", {}, since, now)])
    assert found.keys() == {"k-paid"}
    captured = conn.find_captures([LookupContext("k-capture", {"payment_intent": paid.ref},
                                                 since, now)])
    assert captured.keys() == {"k-capture"}
    listed = [e for e in stripe_exchanges(world)
              if e.method == "GET" and e.path == "/v1/payment_intents"]
    assert any(name == "starting_after" for e in listed for name, _ in e.query)

    exchanges = stripe_exchanges(world)
    statuses = sorted({e.status for e in exchanges})
    assert statuses == [200, 400, 402, 404]  # successes and refusals were both checked
    problems = [p for e in exchanges for p in CONTRACT.check(e)]
    assert problems == []
    for exchange in exchanges:  # Stripe's documented rules the description does not carry
        assert exchange.header("Authorization") == "Bearer sk_test_x"
        assert exchange.header("Stripe-Version") == stripe.api_version
        if exchange.method == "POST":  # docs.stripe.com/api/idempotent_requests
            key = exchange.header("Idempotency-Key")
            assert key and len(key) <= 255, exchange.path


def test_the_check_refuses_what_the_description_does_not_allow(
        world: World, conn: StripeConnector) -> None:
    """The contract check itself can fail: a tampered request or answer is caught."""
    conn.charge_card("cus_1", 500, "k1")
    [created] = stripe_exchanges(world)
    assert CONTRACT.check(created) == []
    intent = json.loads(created.response_body)
    for field, value in (("status", "authorised"), ("amount", "500"), ("livemode", None)):
        bad = replace(created, response_body=json.dumps({**intent, field: value}).encode())
        assert any(field in p for p in CONTRACT.check(bad)), field
    no_id = {k: v for k, v in intent.items() if k != "id"}
    assert CONTRACT.check(replace(created, response_body=json.dumps(no_id).encode()))
    unknown = replace(created, body=created.body + b"&surprise=1")
    assert any("surprise" in p for p in CONTRACT.check(unknown))
    untyped = replace(created, status=400,
                      response_body=b'{"error": {"message": "no", "type": "oops"}}')
    assert any("type" in p for p in CONTRACT.check(untyped))
    assert CONTRACT.check(replace(created, status=418))  # an undocumented status


@pytest.mark.parametrize(("params", "code", "param", "words"), [
    ({"amount": 500, "currency": "xxx"}, None, "currency", "Invalid currency: xxx"),
    ({"amount": 49, "currency": "usd"}, "amount_too_small", "amount", "at least $0.50 usd"),
    ({"amount": 29, "currency": "gbp"}, "amount_too_small", "amount", "at least £0.30 gbp"),
    ({"amount": 49, "currency": "jpy"}, "amount_too_small", "amount", "at least ¥50 jpy"),
    ({"amount": 500, "currency": "usd", "shipping_rate": "x"}, "parameter_unknown",
     "shipping_rate", "Received unknown parameter: shipping_rate"),
])
def test_create_refuses_what_stripe_refuses_and_creates_nothing(
        world: World, sdk: stripe.StripeClient, params: dict[str, Any], code: str | None,
        param: str, words: str) -> None:
    with pytest.raises(stripe.InvalidRequestError) as caught:
        sdk.v1.payment_intents.create(params=cast(Any, {
            **params, "payment_method": "pm_card_visa", "confirm": True,
            "capture_method": "manual"}))
    assert caught.value.http_status == 400 and caught.value.param == param
    [exchange] = stripe_exchanges(world)
    error = error_of(exchange)
    assert error["type"] == "invalid_request_error" and error.get("code") == code
    assert words in error["message"]
    op = CONTRACT.operation("POST", "/v1/payment_intents")
    assert op is not None and CONTRACT.check_response(op, exchange) == []
    outside = CONTRACT.check_request(op, exchange)  # only the unknown parameter is outside it
    assert outside == ([] if code != "parameter_unknown" else
                       ["body (top): Additional properties are not allowed ('shipping_rate' was "
                        "unexpected)"])
    assert world.truth()["payment_intents"] == []


def test_capture_after_cancel_and_over_refund_get_stripes_errors(
        world: World, sdk: stripe.StripeClient) -> None:
    params: Any = {"currency": "usd", "payment_method": "pm_card_visa", "confirm": True,
                   "capture_method": "manual", "amount": 500}
    canceled = sdk.v1.payment_intents.create(params=params)
    sdk.v1.payment_intents.cancel(canceled.id)
    with pytest.raises(stripe.InvalidRequestError, match="status of canceled"):
        sdk.v1.payment_intents.capture(canceled.id)
    paid = sdk.v1.payment_intents.create(params=params)
    sdk.v1.payment_intents.capture(paid.id, params={"amount_to_capture": 400})
    sdk.v1.refunds.create(params={"payment_intent": paid.id, "amount": 300})
    with pytest.raises(stripe.InvalidRequestError, match=r"\(\$1\.01 usd\) is greater than "
                       r"unrefunded amount on charge \(\$1\.00 usd\)"):
        sdk.v1.refunds.create(params={"payment_intent": paid.id, "amount": 101})
    refusals = [e for e in stripe_exchanges(world) if e.status == 400]
    assert [error_of(e).get("code") for e in refusals] == [
        "payment_intent_unexpected_state", "amount_too_large"]
    assert error_of(refusals[0])["payment_intent"]["status"] == "canceled"
    assert [p for e in stripe_exchanges(world) for p in CONTRACT.check(e)] == []
    truth = world.truth()
    assert [r["amount"] for r in truth["refunds"]] == [300]
    assert {p["id"]: p["status"] for p in truth["payment_intents"]} == {
        canceled.id: "canceled", paid.id: "succeeded"}


@pytest.mark.parametrize("query", [
    "metadata['saga_key']:'a' AND status:'succeeded' OR amount>5",   # AND and OR mixed
    "(status:'succeeded' OR status:'canceled')",                     # no parentheses
    "status:succeeded",                                              # strings are quoted
    "description:'x'",                                               # not a search field
    "status>'canceled'",                                             # > on a string field
    " OR ".join(f"metadata['saga_key']:'k{i}'" for i in range(11)),  # more than 10 clauses
    "metadata['saga_key']:'unterminated",
    "",
])
def test_search_outside_the_documented_grammar_is_refused(
        world: World, sdk: stripe.StripeClient, query: str) -> None:
    with pytest.raises(stripe.InvalidRequestError) as caught:
        sdk.v1.payment_intents.search(params={"query": query})
    assert caught.value.http_status == 400 and caught.value.param == "query"
    [exchange] = stripe_exchanges(world)
    assert error_of(exchange)["type"] == "invalid_request_error"
    assert CONTRACT.check(exchange) == []


def test_search_inside_the_grammar_is_answered(world: World, sdk: stripe.StripeClient) -> None:
    sdk.v1.payment_intents.create(params={"amount": 500, "currency": "usd",
                                          "metadata": {"saga_key": "it's"}})
    for query in ("metadata['saga_key']:'it\\'s'", 'metadata["saga_key"]:"it\'s" AND amount>=500',
                  "-status:'canceled' currency:'usd'", "amount>499 OR amount<0"):
        found = sdk.v1.payment_intents.search(params={"query": query})
        assert len(found.data) == 1, query
    assert [p for e in stripe_exchanges(world) for p in CONTRACT.check(e)] == []


def test_rate_limit_and_authentication_errors_keep_stripes_shape(
        world: World, sdk: stripe.StripeClient, clock: ManualClock) -> None:
    world.set_search_rate(1)
    sdk.v1.payment_intents.search(params={"query": "status:'canceled'"})
    with pytest.raises(stripe.RateLimitError):
        sdk.v1.payment_intents.search(params={"query": "status:'canceled'"})
    anonymous = stripe.StripeClient("", base_addresses={"api": world.url}, max_network_retries=0)
    with pytest.raises(stripe.AuthenticationError):
        anonymous.v1.payment_intents.list()
    exchanges = stripe_exchanges(world)
    assert [e.status for e in exchanges] == [200, 429, 401]
    assert [error_of(e).get("code") for e in exchanges[1:]] == ["rate_limit", None]
    assert [p for e in exchanges for p in CONTRACT.check(e)] == []
