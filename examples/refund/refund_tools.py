"""The example's tools: one of each class that matters, against the local world's Stripe-shaped
payments API and email API (`agentsaga world`), in plain HTTP.

    quote_fee      pure           no side effect: called directly, never logged
    charge_fee     compensatable  a card hold (manual capture) seen by finance; found by its key
                                  (lookup) and released by release_fee (its compensation)
    release_fee    irreversible   the counter-action; unwind runs it under its own key
    send_receipt   irreversible   the customer reads it: needs approval at the pivot

Serve them with `agentsaga sidecar --tools ./refund_tools.py`. EXAMPLE_WORLD_URL says where the
systems are (default http://127.0.0.1:8470, where `agentsaga world --port 8470` listens).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import httpx

from agentsaga import (
    NO_LOOKUP,
    Compensation,
    LookupContext,
    OutcomeUnknown,
    Rejected,
    TimeContract,
    ref,
    tool,
)

WORLD = os.environ.get("EXAMPLE_WORLD_URL", "http://127.0.0.1:8470").rstrip("/")
STRIPE_KEY = {"Authorization": "Bearer sk_test_example"}
FEE = 500
TIMEOUT_S = 5.0  # every call's own timeout: the longest it can be on the wire
LIST_PAGES = 10  # the lookups look through at most this many pages of 100
SEND_LOG_LAG_S = 10.0  # the longest the send log lags behind a sent email (the world: 2 s)


def call(method: str, path: str, **kwargs: Any) -> dict[str, Any]:
    """One HTTP call, its outcome in the three words of R5: the result (CONFIRMED), Rejected
    (the server said no: nothing happened), OutcomeUnknown (it may have happened)."""
    try:
        response = httpx.request(method, WORLD + path, timeout=TIMEOUT_S, **kwargs)
    except httpx.ConnectError as exc:  # never reached the server: nothing happened
        raise Rejected(f"{path}: cannot connect ({exc})") from exc
    except httpx.HTTPError as exc:  # timeout or reset after the request went out: maybe
        raise OutcomeUnknown(f"{path}: {type(exc).__name__}") from exc
    if response.status_code in (502, 503, 504) or response.status_code >= 500:
        raise OutcomeUnknown(f"{path}: HTTP {response.status_code}")
    if response.status_code >= 400:
        raise Rejected(f"{path}: HTTP {response.status_code}: {response.text[:200]}",
                       status=response.status_code)
    body: dict[str, Any] = response.json()
    return body


@tool(cls="pure")
def quote_fee(order_id: str) -> dict[str, Any]:
    """The re-shipping fee for an order (pure: computed, nothing changes)."""
    return {"order_id": order_id, "amount": FEE, "currency": "usd"}


def _marked(intent: dict[str, Any], key: str) -> bool:
    return bool(intent.get("metadata", {}).get("saga_key") == key)


def _listed(key: str, params: dict[str, Any]) -> dict[str, Any] | None:
    """The PaymentIntent carrying `key` among those Stripe's list returns for `params`, newest
    first. Stripe's list is consistent (a committed hold is listed at once); its search is not
    ("don't use search for read-after-write flows"), so no lookup here searches."""
    params = {**params, "limit": 100}
    for _ in range(LIST_PAGES):
        page = call("GET", "/v1/payment_intents", headers=STRIPE_KEY, params=params)
        intents: list[dict[str, Any]] = page["data"]
        for intent in intents:
            if _marked(intent, key):
                return intent
        if not page["has_more"] or not intents:
            return None
        params["starting_after"] = intents[-1]["id"]
    raise OutcomeUnknown(f"more than {LIST_PAGES * 100} holds to look through for {key}")


def find_charges(steps: Sequence[LookupContext]) -> dict[str, dict[str, Any]]:
    """The lookup reconcile uses (R7): for each unsettled step, by id when the saga log knows
    it, else the customer's holds created between the step's intent and its deadline (a minute
    either side for the clocks), matched on the key the hold carries."""
    found: dict[str, dict[str, Any]] = {}
    for ctx in steps:
        if ctx.external_ref:
            by_id = call("GET", f"/v1/payment_intents/{ctx.external_ref}", headers=STRIPE_KEY)
            if _marked(by_id, ctx.key):
                found[ctx.key] = by_id
                continue
        window = {"customer": ctx.args["customer_id"],
                  "created[gte]": int(ctx.intended_at.timestamp()) - 60}
        if ctx.deadline is not None:
            window["created[lte]"] = int(ctx.deadline.timestamp()) + 61
        listed = _listed(ctx.key, window)
        if listed is not None:
            found[ctx.key] = listed
    return found


def find_charge(key: str) -> dict[str, Any] | None:
    """The fallback by key alone: the newest holds, listed (consistent), matched on the key."""
    return _listed(key, {})


@tool(cls="compensatable", audience=["finance"], lookup=find_charge, lookup_steps=find_charges,
      compensate=lambda args, key: Compensation("release_fee", {"payment_intent": ref(key)}),
      # the time contract (R7): a call is on the wire at most TIMEOUT_S (httpx enforces it), a
      # hold is listed as soon as it commits (0: the list is consistent), and Stripe answers a
      # re-sent Idempotency-Key with the first result for 24 hours
      timing=TimeContract(call_timeout_s=TIMEOUT_S, visible_within_s=0, dedupes_for_s=86400))
def charge_fee(customer_id: str, order_id: str, amount: int, idempotency_key: str
               ) -> dict[str, Any]:
    """Put a hold on the customer's card (captured later, released if the run unwinds)."""
    return call("POST", "/v1/payment_intents", headers={
        **STRIPE_KEY, "Idempotency-Key": idempotency_key,  # the key, natively (R4) ...
    }, data={"amount": amount, "currency": "usd", "customer": customer_id,
             "payment_method": "pm_card_visa", "confirm": "true", "capture_method": "manual",
             "metadata[saga_key]": idempotency_key,  # ... and as a findable marker
             "metadata[order_id]": order_id})


@tool(cls="irreversible", audience=["finance"], lookup=NO_LOOKUP)
def release_fee(payment_intent: str, idempotency_key: str) -> dict[str, Any]:
    """The compensation of charge_fee: cancel the hold. It is registered like any tool, since
    unwind calls it through the registry."""
    return call("POST", f"/v1/payment_intents/{payment_intent}/cancel",
                headers={**STRIPE_KEY, "Idempotency-Key": idempotency_key})


def find_receipts(steps: Sequence[LookupContext]) -> dict[str, dict[str, Any]]:
    """By id when the saga log knows it (consistent); else the send log, newest first, which
    lags like a search index: the time contract below says by how much."""
    found: dict[str, dict[str, Any]] = {}
    for ctx in steps:
        if ctx.external_ref:
            by_id = call("GET", f"/emails/{ctx.external_ref}")
            if by_id.get("headers", {}).get("X-Saga-Key") == ctx.key:
                found[ctx.key] = by_id
                continue
        listed = find_receipt(ctx.key)
        if listed is not None:
            found[ctx.key] = listed
    return found


def find_receipt(key: str) -> dict[str, Any] | None:
    page = call("GET", "/emails", params={"limit": 100})
    emails: list[dict[str, Any]] = page["data"]
    for sent in emails:
        if sent.get("headers", {}).get("X-Saga-Key") == key:
            return sent
    if page["has_more"]:
        raise OutcomeUnknown(f"{key} is not among the newest 100 emails; cannot tell")
    return None


@tool(cls="irreversible", audience=["customer"], lookup=find_receipt, lookup_steps=find_receipts,
      # the send log shows an email up to SEND_LOG_LAG_S after it is sent (`agentsaga world
      # --search-lag`, 2 s by default); the email API keeps an Idempotency-Key for 24 hours
      timing=TimeContract(call_timeout_s=TIMEOUT_S, visible_within_s=SEND_LOG_LAG_S,
                          dedupes_for_s=86400))
def send_receipt(to: str, subject: str, body: str, idempotency_key: str) -> dict[str, Any]:
    """Email the customer. Once read, it cannot be taken back: approved at the pivot first."""
    return call("POST", "/emails", headers={"Idempotency-Key": idempotency_key}, json={
        "from": "support@shop.example", "to": [to], "subject": subject, "text": body,
        "headers": {"X-Saga-Key": idempotency_key}})
