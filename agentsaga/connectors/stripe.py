"""Stripe through the official SDK: authorise (manual capture), capture, cancel or refund.

The step's key goes out twice (R4): as the `Idempotency-Key` header, so that a repeat within
Stripe's retention returns the first answer, and as `metadata.saga_key`, so that a lookup after
the key was pruned still finds the PaymentIntent.

Reconcile finds an effect by a consistent read (R7), never by the Search API. Stripe: "Don't
use search for read-after-write flows" (data is searchable "in under 1 minute", up to an hour
behind during outages); "for immediate consistency, use the list APIs" (docs.stripe.com/search;
../shared/reference/external-apis.md §1.4). So a charge is found by listing PaymentIntents
`created` within its step's window (intent time to deadline, with a margin for the two clocks),
comparing `metadata.saga_key`, then retrieving the match by id; a capture by retrieving its
PaymentIntent by id and comparing `metadata.saga_capture_key`. Both are visible at once
(`visible_within_s` 0). The search (`find`, `find_many`) remains for a lookup by key alone.
`max_network_retries=0`: the harness, not the SDK, decides what a retry is.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

import stripe

from agentsaga.connectors.config import HttpSettings, StripeConfig
from agentsaga.connectors.json_api import Pacer, SearchRateLimited, with_backoff
from agentsaga.connectors.paths import checked_id, invalid_id
from agentsaga.errors import OutcomeUnknown, Rejected
from agentsaga.saga.registry import Effect, LookupContext

T = TypeVar("T")
SEARCH_CLAUSES = 10  # Stripe search: at most 10 clauses per query
LIST_PAGE = 100  # Stripe list endpoints: `limit` 1..100
LIST_PAGES = 20
"""Pages of 100 PaymentIntents one window's listing reads before it gives up (the lookup then
fails, and its steps stay UNKNOWN: never "not found" from a listing cut short)."""
CLOCK_MARGIN_S = 60.0
"""Widens each step's `created` window on both sides: Stripe stamps `created` by its clock
(whole seconds), the window comes from Postgres's."""
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


@dataclass(frozen=True)
class Window:
    """A `created` range (Unix seconds, inclusive) and the keys whose steps fall in it."""

    gte: int
    lte: int | None
    keys: frozenset[str]


def windows(steps: Sequence[LookupContext], margin_s: float = CLOCK_MARGIN_S) -> list[Window]:
    """Each step's window, from its intent time to its deadline widened by `margin_s`; windows
    that overlap are listed once. A row without a deadline is open-ended."""
    spans = sorted(
        ((math.floor(c.intended_at.timestamp() - margin_s),
          None if c.deadline is None else math.ceil(c.deadline.timestamp() + margin_s), c.key)
         for c in steps), key=lambda span: span[0])
    out: list[Window] = []
    for gte, lte, key in spans:
        last = out[-1] if out else None
        if last is not None and (last.lte is None or gte <= last.lte):
            top = None if last.lte is None or lte is None else max(last.lte, lte)
            out[-1] = Window(last.gte, top, last.keys | {key})
        else:
            out.append(Window(gte, lte, frozenset({key})))
    return out


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
        self.timeout_s = config.timeout_s
        """Every request's timeout (the client's), and so charge_card's deadline (R7)."""
        self.client = stripe.StripeClient(
            config.api_key, base_addresses=base,  # type: ignore[arg-type]
            max_network_retries=0,
            http_client=stripe.HTTPXClient(timeout=config.timeout_s, allow_sync_methods=True),
        )
        self.sleep = sleep
        self.pacer = Pacer(http.search_rate, clock=clock, sleep=sleep)
        self.list_pages = LIST_PAGES

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
        payment_intent = checked_id(payment_intent, "payment_intent")
        pi = self._do("capture payment intent", lambda: self.client.v1.payment_intents.capture(
            payment_intent, params=params,  # type: ignore[arg-type]
            options={"idempotency_key": idempotency_key}))
        return Effect(pi.id, _intent_result(pi))

    def cancel_or_refund_payment(self, idempotency_key: str, payment: str | None = None,
                                 charge_key: str | None = None, amount: int | None = None,
                                 reason: str = "requested_by_customer") -> Effect:
        """Undo a payment: cancel an authorisation (releases the hold), refund a capture, and
        do nothing for one already cancelled. Safe to repeat under the same key."""
        if payment is not None and (payment or not charge_key):
            payment = checked_id(payment, "payment")
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

    def find_charges(self, steps: Sequence[LookupContext]) -> dict[str, Effect]:
        """charge_card's consistent lookup: by id when the log knows it, else the PaymentIntents
        listed in each step's `created` window, matched on `metadata.saga_key`, then retrieved
        by id (the current state)."""
        found: dict[str, Effect] = {}
        unknown_id: list[LookupContext] = []
        for ctx in steps:
            pi = self._retrieve_marked(ctx.external_ref, "saga_key", ctx.key)
            if pi is not None:
                found[ctx.key] = Effect(pi.id, _intent_result(pi))
            else:
                unknown_id.append(ctx)
        for window in windows(unknown_id):
            for key, pi_id in self._listed(window).items():
                pi = self._do("retrieve payment intent",
                              partial(self.client.v1.payment_intents.retrieve, pi_id))
                found[key] = Effect(pi.id, _intent_result(pi))
        return found

    def find_captures(self, steps: Sequence[LookupContext]) -> dict[str, Effect]:
        """capture_payment's consistent lookup: retrieve the PaymentIntent it names by id; the
        capture happened if it carries the step's `metadata.saga_capture_key`."""
        found: dict[str, Effect] = {}
        for ctx in steps:
            pi = self._retrieve_marked(str(ctx.args.get("payment_intent") or ""),
                                       "saga_capture_key", ctx.key)
            if pi is not None and pi.status == "succeeded":
                found[ctx.key] = Effect(pi.id, _intent_result(pi))
        return found

    def _retrieve_marked(self, pi_id: str | None, field: str, key: str) -> Any | None:
        """The PaymentIntent `pi_id` if it exists and carries `key` in `metadata[field]`."""
        if not pi_id or invalid_id(pi_id):
            return None  # no object has such an id (and its call was refused before sending)
        try:
            pi = self._do("retrieve payment intent",
                          lambda: self.client.v1.payment_intents.retrieve(pi_id))
        except Rejected as exc:
            if exc.status == 404:  # no such PaymentIntent: it carries nothing
                return None
            raise
        return pi if _meta(pi).get(field) == key else None

    def _listed(self, window: Window) -> dict[str, str]:
        """The ids of the PaymentIntents created in `window` that carry one of its keys, paging
        with `starting_after` for at most `list_pages` pages (beyond: OutcomeUnknown)."""
        created: dict[str, int] = {"gte": window.gte}
        if window.lte is not None:
            created["lte"] = window.lte
        params: dict[str, Any] = {"created": created, "limit": LIST_PAGE}
        hits: dict[str, str] = {}
        for _ in range(self.list_pages):
            page = with_backoff(self._lister(dict(params)), self.http, "stripe list",
                                sleep=self.sleep)
            for pi in page.data:
                key = _meta(pi).get("saga_key")
                if key in window.keys and key not in hits:
                    hits[key] = pi.id
            if len(hits) == len(window.keys) or not page.has_more or not page.data:
                return hits
            params["starting_after"] = page.data[-1].id
        raise OutcomeUnknown(
            f"stripe list: more than {self.list_pages * LIST_PAGE} PaymentIntents created between "
            f"{window.gte} and {window.lte}; cannot tell whether {len(window.keys) - len(hits)} "
            "step(s) happened (they stay UNKNOWN; a person can settle them)")

    def _lister(self, params: dict[str, Any]) -> Callable[[], Any]:
        def call() -> Any:
            try:
                return self.client.v1.payment_intents.list(params=params)  # type: ignore[arg-type]
            except stripe.RateLimitError as exc:
                raise SearchRateLimited("stripe list") from exc
            except stripe.StripeError as exc:
                raise classify(exc, "list payment intents") from exc
        return call

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
