"""Stripe through the official SDK: authorise (manual capture), capture, cancel or refund.

The step's key goes out twice (R4): as the `Idempotency-Key` header, so that a repeat within
Stripe's retention returns the first answer, and as `metadata.saga_key`, so that a lookup after
the key was pruned still finds the PaymentIntent through the Search API (which lags: R7).
`max_network_retries=0`: the harness, not the SDK, decides what a retry is.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import stripe

from agentsaga.connectors.config import HttpSettings, StripeConfig
from agentsaga.connectors.json_api import Pacer, SearchRateLimited, with_backoff
from agentsaga.errors import OutcomeUnknown, Rejected
from agentsaga.registry import Effect

T = TypeVar("T")
SEARCH_CLAUSES = 10  # Stripe search: at most 10 clauses per query
_CANCELABLE = ("requires_payment_method", "requires_confirmation", "requires_action",
               "requires_capture", "processing")


def reason(exc: stripe.StripeError) -> str:
    """What Stripe said, with the error's `code` and `param` when it names them."""
    error = getattr(exc, "error", None)
    code = getattr(error, "code", None) or exc.code
    param = getattr(error, "param", None) or getattr(exc, "param", None)
    named = ", ".join(f"{k} {v}" for k, v in (("code", code), ("param", param)) if v)
    text = exc.user_message or str(exc)
    return f"{type(exc).__name__} ({named}): {text}" if named else f"{type(exc).__name__}: {text}"


def classify(exc: stripe.StripeError, what: str) -> Exception:
    """R5 for the SDK's errors: Rejected (nothing happened) or OutcomeUnknown (maybe)."""
    status = exc.http_status
    message = f"stripe {what}: {reason(exc)}"
    if isinstance(exc, stripe.APIConnectionError):
        return OutcomeUnknown(message)
    if isinstance(exc, stripe.RateLimitError):
        return Rejected(message, status=429)  # limited before execution: nothing happened
    if isinstance(exc, stripe.APIError) and status == 409:
        return OutcomeUnknown(message + " (a request with this key is still in flight)")
    if isinstance(exc, stripe.IdempotencyError):  # the key ran before, with other parameters
        return OutcomeUnknown(message + " (this key was used by an earlier request, which may "
                              "have taken effect)")
    if status is not None and 400 <= status < 500:
        return Rejected(message, status=status)
    return OutcomeUnknown(message)


def _intent_result(pi: Any) -> dict[str, Any]:
    return {"id": pi.id, "status": pi.status, "amount": pi.amount, "currency": pi.currency,
            "customer": pi.customer, "capture_method": pi.capture_method,
            "amount_received": pi.amount_received, "latest_charge": pi.latest_charge,
            "metadata": _meta(pi)}


def _meta(obj: Any) -> dict[str, str]:
    """An object's metadata as a dict (the SDK's StripeObject is not a dict in 16.x)."""
    raw = getattr(obj, "metadata", None)
    if raw is None:
        return {}
    to_dict = getattr(raw, "to_dict", None)
    return dict(to_dict()) if callable(to_dict) else dict(raw)


def _quote(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


class StripeConnector:
    """charge_card, capture_payment and cancel_or_refund_payment, with lookups by key."""

    def __init__(self, config: StripeConfig, http: HttpSettings, *,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        """`clock` and `sleep` pace the searches and time the back-off after a 429 (the clock
        seam: a test passes the world's ManualClock and its `advance`)."""
        base = {"api": config.api_base} if config.api_base else None
        self.http = http
        self.client = stripe.StripeClient(
            config.api_key, base_addresses=base,  # type: ignore[arg-type]
            max_network_retries=0,
            http_client=stripe.HTTPXClient(timeout=http.timeout_s, allow_sync_methods=True),
        )
        self.sleep = sleep
        self.pacer = Pacer(http.search_rate, clock=clock, sleep=sleep)

    def _do(self, what: str, call: Callable[[], T]) -> T:
        try:
            return call()
        except stripe.StripeError as exc:
            raise classify(exc, what) from exc

    # -- tools -----------------------------------------------------------------------------

    def charge_card(self, customer_id: str, amount: int, idempotency_key: str,
                    currency: str = "usd", reason: str = "", order_id: str = "",
                    payment_method: str = "pm_card_visa", receipt: bool = False) -> Effect:
        """Authorise `amount` on the customer's card (manual capture: a hold, not a charge)."""
        metadata = {"saga_key": idempotency_key, "receipt": "true" if receipt else "false"}
        if order_id:
            metadata["order_id"] = str(order_id)
        params: dict[str, Any] = {
            "amount": int(amount), "currency": currency, "customer": customer_id,
            "payment_method": payment_method, "confirm": True, "capture_method": "manual",
            "metadata": metadata,
        }
        if reason:
            params["description"] = reason
        pi = self._do("create payment intent", lambda: self.client.v1.payment_intents.create(
            params=params, options={"idempotency_key": idempotency_key}))  # type: ignore[arg-type]
        return Effect(pi.id, _intent_result(pi))

    def capture_payment(self, payment_intent: str, idempotency_key: str,
                        amount: int | None = None, receipt: bool = False) -> Effect:
        """Commit step: capture an authorised PaymentIntent."""
        params: dict[str, Any] = {"metadata": {"saga_capture_key": idempotency_key}}
        if amount is not None:
            params["amount_to_capture"] = int(amount)
        pi = self._do("capture payment intent", lambda: self.client.v1.payment_intents.capture(
            payment_intent, params=params,  # type: ignore[arg-type]
            options={"idempotency_key": idempotency_key}))
        return Effect(pi.id, _intent_result(pi))

    def cancel_or_refund_payment(self, idempotency_key: str, payment: str | None = None,
                                 charge_key: str | None = None, amount: int | None = None,
                                 reason: str = "requested_by_customer") -> Effect:
        """Undo a payment: cancel an authorisation (releases the hold), refund a capture, and
        do nothing for one already cancelled. Safe to repeat under the same key."""
        if payment:
            pi = self._do("retrieve payment intent",
                          lambda: self.client.v1.payment_intents.retrieve(payment))
        elif charge_key:
            found = self.find(charge_key)
            if found is None:
                raise Rejected(f"stripe: no PaymentIntent carries saga_key {charge_key}")
            pi = self._do("retrieve payment intent",
                          lambda: self.client.v1.payment_intents.retrieve(str(found.ref)))
        else:
            raise Rejected("cancel_or_refund_payment needs payment= or charge_key=")
        if pi.status == "canceled":
            return Effect(pi.id, {**_intent_result(pi), "action": "already_canceled"})
        if pi.status in _CANCELABLE:
            cancel_reason = "abandoned" if reason not in ("duplicate", "fraudulent") else reason
            done = self._do("cancel payment intent", lambda: self.client.v1.payment_intents.cancel(
                pi.id, params={"cancellation_reason": cancel_reason},
                options={"idempotency_key": idempotency_key}))
            return Effect(done.id, {**_intent_result(done), "action": "canceled"})
        if pi.status != "succeeded":
            raise Rejected(f"stripe: PaymentIntent {pi.id} is {pi.status}; cannot undo it")
        refunds = self._do("list refunds", lambda: self.client.v1.refunds.list(
            params={"payment_intent": pi.id, "limit": 100})).data
        for refund in refunds:
            if _meta(refund).get("saga_key") == idempotency_key:
                return Effect(refund.id, {"id": refund.id, "action": "refunded",
                                          "payment_intent": pi.id, "amount": refund.amount})
        refunded = sum(r.amount for r in refunds if r.status in ("succeeded", "pending"))
        if refunded >= (pi.amount_received or 0):  # another compensation refunded it in full
            return Effect(pi.id, {**_intent_result(pi), "action": "already_refunded",
                                  "amount_refunded": refunded})
        params: dict[str, Any] = {"payment_intent": pi.id, "reason": reason,
                                  "metadata": {"saga_key": idempotency_key}}
        if amount is not None:
            params["amount"] = int(amount)
        refund = self._do("create refund", lambda: self.client.v1.refunds.create(
            params=params, options={"idempotency_key": idempotency_key}))  # type: ignore[arg-type]
        return Effect(refund.id, {"id": refund.id, "action": "refunded", "payment_intent": pi.id,
                                  "amount": refund.amount})

    # -- lookups (R7) ----------------------------------------------------------------------

    def find(self, key: str, field: str = "saga_key") -> Effect | None:
        return self.find_many([key], field).get(key)

    def find_capture(self, key: str) -> Effect | None:
        return self.find(key, "saga_capture_key")

    def find_many(self, keys: Sequence[str], field: str = "saga_key") -> dict[str, Effect]:
        """Search by metadata, up to 10 keys per query (OR clauses), paced and backing off."""
        found: dict[str, Effect] = {}
        wanted = list(dict.fromkeys(keys))
        for start in range(0, len(wanted), SEARCH_CLAUSES):
            chunk = wanted[start:start + SEARCH_CLAUSES]
            query = " OR ".join(f"metadata['{field}']:{_quote(k)}" for k in chunk)
            hits: list[Any] = with_backoff(self._searcher(query), self.http, "stripe search",
                                          sleep=self.sleep)
            for pi in hits:
                key = _meta(pi).get(field)
                if key in chunk and key not in found:
                    found[key] = Effect(pi.id, _intent_result(pi))
        return found

    def _searcher(self, query: str) -> Callable[[], list[Any]]:
        return lambda: list(self._search(query))

    def _search(self, query: str) -> Iterator[Any]:
        page: str | None = None
        while True:
            self.pacer.wait()
            params: dict[str, Any] = {"query": query, "limit": 100}
            if page:
                params["page"] = page
            try:
                result = self.client.v1.payment_intents.search(params=params)  # type: ignore[arg-type]
            except stripe.RateLimitError as exc:
                raise SearchRateLimited("stripe search") from exc
            except stripe.StripeError as exc:
                raise classify(exc, "search payment intents") from exc
            yield from result.data
            if not result.has_more or not result.next_page:
                return
            page = result.next_page
