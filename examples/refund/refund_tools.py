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
from typing import Any

import httpx

from agentsaga import NO_LOOKUP, Compensation, OutcomeUnknown, Rejected, ref, tool

WORLD = os.environ.get("EXAMPLE_WORLD_URL", "http://127.0.0.1:8470").rstrip("/")
STRIPE_KEY = {"Authorization": "Bearer sk_test_example"}
FEE = 500


def call(method: str, path: str, **kwargs: Any) -> dict[str, Any]:
    """One HTTP call, its outcome in the three words of R5: the result (CONFIRMED), Rejected
    (the server said no: nothing happened), OutcomeUnknown (it may have happened)."""
    try:
        response = httpx.request(method, WORLD + path, timeout=5.0, **kwargs)
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


def find_charge(key: str) -> dict[str, Any] | None:
    """The hold that carries this step's key, or None. Its `id` becomes the step's external
    ref (what `ref(key)` in the compensation turns into)."""
    found = call("GET", "/v1/payment_intents/search", headers=STRIPE_KEY,
                 params={"query": f"metadata['saga_key']:'{key}'"})
    return found["data"][0] if found["data"] else None


@tool(cls="compensatable", audience=["finance"], lookup=find_charge,
      compensate=lambda args, key: Compensation("release_fee", {"payment_intent": ref(key)}))
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


def find_receipt(key: str) -> dict[str, Any] | None:
    found = call("GET", "/emails", params={"header": f"X-Saga-Key:{key}"})
    return found["data"][0] if found["data"] else None


@tool(cls="irreversible", audience=["customer"], lookup=find_receipt)
def send_receipt(to: str, subject: str, body: str, idempotency_key: str) -> dict[str, Any]:
    """Email the customer. Once read, it cannot be taken back: approved at the pivot first."""
    return call("POST", "/emails", headers={"Idempotency-Key": idempotency_key}, json={
        "from": "support@shop.example", "to": [to], "subject": subject, "text": body,
        "headers": {"X-Saga-Key": idempotency_key}})
