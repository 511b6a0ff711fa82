"""Stripe stand-in: PaymentIntents (manual capture, cancel, search), Refunds, Stripe's idempotency.

Served under `/v1/`; point the official SDK at it with
`stripe.StripeClient("sk_test_x", base_addresses={"api": world.url})`. Requests are
form-encoded with bracket keys, as the SDK sends them; answers carry `"object"` and the
non-optional fields the SDK's typed objects need. Payment methods are not modelled: any `pm_...`
authorises, except ids containing `declined` (`pm_card_chargeDeclined`): 402 `card_declined`.

Strict where Stripe is strict: currencies outside Stripe's list and amounts below a currency's
minimum are refused (`stripe_currencies`), so are parameters the stand-in does not model
(`parameter_unknown`), a capture of an intent not in `requires_capture`, a refund above what is
left, and search queries outside the documented grammar (`stripe_query`). The objects and errors
are held to Stripe's OpenAPI description by tests/integration/test_contract_stripe.py.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl

from aiohttp import web

from agentsaga.connectors.stripe_currencies import MAXIMUM, MINIMUM, SUPPORTED, display
from agentsaga_lab.world.idempotency import Route, uncached
from agentsaga_lab.world.index import LaggedIndex, RateLimiter, WorldConfig
from agentsaga_lab.world.stripe_api import (
    STRIPE_POLICY,
    StripeError,
    int_param,
    metadata_param,
    policy_error,
    stripe_json,
    true_param,
)
from agentsaga_lab.world.stripe_query import QueryError, parse_form, parse_search

Obj = dict[str, Any]
Params = dict[str, Any]
Endpoint = Callable[[Params, web.Request], Obj]


# the parameters each endpoint models; any other is refused as Stripe refuses unknown ones
_PARAMS: dict[str, frozenset[str]] = {
    "create_intent": frozenset({"amount", "currency", "customer", "description", "metadata",
                                "payment_method", "confirm", "capture_method"}),
    "list_intents": frozenset({"customer", "created", "limit", "starting_after"}),
    "search_intents": frozenset({"query", "limit", "page", "expand"}),
    "retrieve_intent": frozenset(),
    "update_intent": frozenset({"metadata", "description"}),
    "confirm_intent": frozenset({"payment_method"}),
    "capture_intent": frozenset({"amount_to_capture", "metadata"}),
    "cancel_intent": frozenset({"cancellation_reason"}),
    "create_refund": frozenset({"payment_intent", "charge", "amount", "reason", "metadata"}),
    "list_refunds": frozenset({"payment_intent", "limit", "starting_after"}),
    "retrieve_refund": frozenset(),
}
_CANCELABLE = ("requires_payment_method", "requires_capture", "requires_confirmation",
               "requires_action", "processing")


class StripeStandIn:
    """The state and routes of the Stripe stand-in."""

    def __init__(self, config: WorldConfig) -> None:
        self.config = config
        self.reset()

    def reset(self) -> None:
        self.intents: dict[str, Obj] = {}
        self.refunds: dict[str, Obj] = {}
        self.refunded: dict[str, int] = {}
        self.keys: dict[str, list[str]] = {}
        self.charges: dict[str, str] = {}  # charge id -> payment intent id
        self.index = LaggedIndex(self.config)
        self.search_limiter = RateLimiter(self.config)

    # --- plumbing ------------------------------------------------------------------------------

    def routes(self) -> list[Route]:
        def api(method: str, path: str, fn: Endpoint) -> Route:
            async def handler(request: web.Request) -> web.Response:
                return await self._answer(request, fn)
            return Route(method, path, handler, STRIPE_POLICY if method == "POST" else None)

        pi = "/v1/payment_intents"
        return [
            api("POST", pi, self.create_intent),
            api("GET", pi, self.list_intents),
            api("GET", f"{pi}/search", self.search_intents),
            api("GET", pi + "/{id}", self.retrieve_intent),
            api("POST", pi + "/{id}", self.update_intent),
            api("POST", pi + "/{id}/confirm", self.confirm_intent),
            api("POST", pi + "/{id}/capture", self.capture_intent),
            api("POST", pi + "/{id}/cancel", self.cancel_intent),
            api("POST", "/v1/refunds", self.create_refund),
            api("GET", "/v1/refunds", self.list_refunds),
            api("GET", "/v1/refunds/{id}", self.retrieve_refund),
        ]

    async def _answer(self, request: web.Request, fn: Endpoint) -> web.Response:
        auth = request.headers.get("Authorization", "")
        if not auth.startswith("Bearer sk_") and not auth.startswith("Bearer rk_"):
            return policy_error(401, {
                "type": "invalid_request_error",
                "message": "You did not provide an API key. You need to provide your API key in "
                "the Authorization header, using Bearer auth.",
            })
        pairs = list(request.query.items())
        if request.method == "POST":
            pairs = parse_qsl((await request.read()).decode(), keep_blank_values=True)
        try:
            params = parse_form(pairs)
            unknown = sorted(set(params) - _PARAMS[fn.__name__])
            if unknown:
                raise StripeError(400, f"Received unknown parameter: {unknown[0]}",
                                  code="parameter_unknown", param=unknown[0])
            obj = fn(params, request)
        except StripeError as exc:
            response = stripe_json(exc.status, {"error": exc.body})
            return response if exc.cache else uncached(response)
        except ValueError as exc:
            return policy_error(400, {"type": "invalid_request_error", "message": str(exc)})
        return stripe_json(200, obj)

    def _save(self, pi: Obj, request: web.Request) -> Obj:
        self.intents[pi["id"]] = pi
        key = request.headers.get("Idempotency-Key")
        if key and key not in self.keys.setdefault(pi["id"], []):
            self.keys[pi["id"]].append(key)
        self.index.put(pi["id"], pi)
        return pi

    def _intent(self, request: web.Request) -> Obj:
        pi_id = request.match_info["id"]
        if pi_id not in self.intents:
            raise StripeError(404, f"No such payment_intent: '{pi_id}'", code="resource_missing",
                              param="intent")
        return self.intents[pi_id]

    def _unexpected(self, pi: Obj, done: str, allowed: tuple[str, ...]) -> StripeError:
        return StripeError(
            400,
            f"This PaymentIntent could not be {done} because it has a status of {pi['status']}. "
            "Only a PaymentIntent with one of the following statuses may be "
            f"{done}: {', '.join(allowed)}.",
            code="payment_intent_unexpected_state", cache=True, extra={"payment_intent": pi},
        )

    # --- PaymentIntents ---------------------------------------------------------------------------

    def create_intent(self, params: Params, request: web.Request) -> Obj:
        amount = int_param(params, "amount", required=True)
        assert amount is not None
        raw_currency = str(params.get("currency") or "")
        if not raw_currency:
            raise StripeError(400, "Missing required param: currency.", code="parameter_missing",
                              param="currency")
        currency = raw_currency.lower()
        if currency not in SUPPORTED:
            raise StripeError(400, f"Invalid currency: {raw_currency}. Stripe currently supports "
                              f"these currencies: {', '.join(sorted(SUPPORTED))}",
                              param="currency")
        minimum = MINIMUM.get(currency, 1)
        if amount < minimum:
            raise StripeError(400, f"Amount must be at least {display(minimum, currency)}",
                              code="amount_too_small", param="amount")
        if amount > MAXIMUM:
            raise StripeError(400, f"Amount must be no more than {display(MAXIMUM, currency)}",
                              code="amount_too_large", param="amount")
        capture = str(params.get("capture_method") or "automatic")
        if capture not in ("automatic", "automatic_async", "manual"):
            raise StripeError(400, f"Invalid capture_method: {capture}.", param="capture_method")
        pi_id = "pi_" + secrets.token_hex(12)
        pm = params.get("payment_method") or None
        pi: Obj = {
            "id": pi_id, "object": "payment_intent", "amount": amount, "amount_capturable": 0,
            "amount_received": 0, "application": None, "application_fee_amount": None,
            "automatic_payment_methods": None, "canceled_at": None, "cancellation_reason": None,
            "capture_method": capture, "client_secret": f"{pi_id}_secret_{secrets.token_hex(8)}",
            "confirmation_method": "automatic", "created": int(time.time()),
            "currency": currency, "customer": params.get("customer") or None,
            "description": params.get("description") or None, "last_payment_error": None,
            "latest_charge": None, "livemode": False, "metadata": metadata_param(params),
            "next_action": None, "on_behalf_of": None, "payment_method": pm,
            "payment_method_types": ["card"], "processing": None, "receipt_email": None,
            "review": None, "setup_future_usage": None, "shipping": None,
            "statement_descriptor": None, "status": "requires_payment_method",
            "transfer_data": None, "transfer_group": None,
        }
        if pm:
            pi["status"] = "requires_confirmation"
        if true_param(params, "confirm"):
            if not pm:
                raise StripeError(400, "You cannot confirm this PaymentIntent because it's "
                                  "missing a payment method.", param="payment_method",
                                  code="payment_intent_unexpected_state")
            return self._confirm(pi, request)
        return self._save(pi, request)

    def _confirm(self, pi: Obj, request: web.Request) -> Obj:
        if "declined" in str(pi["payment_method"]).lower():
            pi["status"] = "requires_payment_method"
            pi["last_payment_error"] = {"type": "card_error", "code": "card_declined",
                                        "decline_code": "generic_decline",
                                        "message": "Your card was declined."}
            self._save(pi, request)
            raise StripeError(402, "Your card was declined.", type="card_error",
                              code="card_declined", cache=True,
                              extra={"decline_code": "generic_decline", "payment_intent": pi})
        charge = "ch_" + secrets.token_hex(12)
        self.charges[charge] = pi["id"]
        pi["latest_charge"] = charge
        if pi["capture_method"] == "manual":
            pi["status"], pi["amount_capturable"] = "requires_capture", pi["amount"]
        else:
            pi["status"], pi["amount_received"] = "succeeded", pi["amount"]
        return self._save(pi, request)

    def confirm_intent(self, params: Params, request: web.Request) -> Obj:
        pi = self._intent(request)
        if pi["status"] not in ("requires_payment_method", "requires_confirmation"):
            raise self._unexpected(pi, "confirmed",
                                   ("requires_payment_method", "requires_confirmation"))
        if params.get("payment_method"):
            pi["payment_method"] = params["payment_method"]
        if not pi["payment_method"]:
            raise StripeError(400, "You cannot confirm this PaymentIntent because it's missing a "
                              "payment method.", code="payment_intent_unexpected_state", cache=True)
        return self._confirm(pi, request)

    def capture_intent(self, params: Params, request: web.Request) -> Obj:
        pi = self._intent(request)
        if pi["status"] != "requires_capture":
            raise self._unexpected(pi, "captured", ("requires_capture",))
        amount = int_param(params, "amount_to_capture")
        amount = pi["amount_capturable"] if amount is None else amount
        if amount <= 0 or amount > pi["amount_capturable"]:
            raise StripeError(400, "The amount to capture must be positive and at most the "
                              f"amount capturable ({pi['amount_capturable']}).",
                              code="amount_too_large", param="amount_to_capture")
        pi.update(status="succeeded", amount_received=amount, amount_capturable=0)
        pi["metadata"].update(metadata_param(params))
        return self._save(pi, request)

    def cancel_intent(self, params: Params, request: web.Request) -> Obj:
        pi = self._intent(request)
        if pi["status"] not in _CANCELABLE:
            raise self._unexpected(pi, "canceled", _CANCELABLE)
        reason = params.get("cancellation_reason") or None
        if reason not in (None, "duplicate", "fraudulent", "requested_by_customer", "abandoned"):
            raise StripeError(400, f"Invalid cancellation_reason: {reason}.",
                              param="cancellation_reason")
        pi.update(status="canceled", amount_capturable=0, canceled_at=int(time.time()),
                  cancellation_reason=reason)
        return self._save(pi, request)

    def update_intent(self, params: Params, request: web.Request) -> Obj:
        pi = self._intent(request)
        for name, value in metadata_param(params).items():
            if value == "":
                pi["metadata"].pop(name, None)
            else:
                pi["metadata"][name] = value
        if "description" in params:
            pi["description"] = params["description"] or None
        return self._save(pi, request)

    def retrieve_intent(self, params: Params, request: web.Request) -> Obj:
        return self._intent(request)

    def list_intents(self, params: Params, request: web.Request) -> Obj:
        rows = list(reversed(self.intents.values()))
        if params.get("customer"):
            rows = [pi for pi in rows if pi["customer"] == params["customer"]]
        created = params.get("created")
        if isinstance(created, dict):
            ops = {"gt": int.__gt__, "gte": int.__ge__, "lt": int.__lt__, "lte": int.__le__}
            for op, bound in created.items():
                if op not in ops:
                    raise StripeError(400, f"Invalid created[{op}].", param=f"created[{op}]")
                rows = [pi for pi in rows if ops[op](pi["created"], int(bound))]
        elif created:
            rows = [pi for pi in rows if pi["created"] == int(created)]
        if params.get("starting_after"):
            ids = [pi["id"] for pi in rows]
            after = params["starting_after"]
            rows = rows[ids.index(after) + 1:] if after in ids else []
        return self._page(rows, params, "/v1/payment_intents")

    def _page(self, rows: list[Obj], params: Params, url: str) -> Obj:
        limit = int_param(params, "limit") or 10
        if not 1 <= limit <= 100:
            raise StripeError(400, "Invalid limit: must be between 1 and 100.", param="limit")
        return {"object": "list", "url": url, "has_more": len(rows) > limit, "data": rows[:limit]}

    def search_intents(self, params: Params, request: web.Request) -> Obj:
        if not self.config.accounts.stripe_search:
            raise StripeError(400, "Search is not available for this account. Use the list "
                              "API to find objects instead.", param="query")
        if not self.search_limiter.allow():
            raise StripeError(429, "Too many requests hit the API too quickly (search is limited "
                              f"to {self.config.search_rate:g} requests per second).",
                              code="rate_limit")
        try:
            query = parse_search(str(params.get("query") or ""))
        except QueryError as exc:
            raise StripeError(400, str(exc), param="query") from None
        rows = [pi for pi in reversed(self.index.visible()) if query.test(pi)]
        limit = int_param(params, "limit") or 10
        if not 1 <= limit <= 100:
            raise StripeError(400, "Invalid limit: must be between 1 and 100.", param="limit")
        start = int(params["page"]) if str(params.get("page") or "").isdigit() else 0
        chunk, more = rows[start:start + limit], len(rows) > start + limit
        result: Obj = {"object": "search_result", "url": "/v1/payment_intents/search",
                       "has_more": more, "next_page": str(start + limit) if more else None,
                       "data": chunk}
        if "total_count" in (params.get("expand") or []):
            result["total_count"] = len(rows)
        return result

    # --- Refunds ---------------------------------------------------------------------------------

    def create_refund(self, params: Params, request: web.Request) -> Obj:
        pi_id = params.get("payment_intent") or self.charges.get(str(params.get("charge") or ""))
        if not pi_id:
            raise StripeError(400, "One of the following params should be provided for this "
                              "request: payment_intent or charge.", code="parameter_missing")
        if pi_id not in self.intents:
            raise StripeError(404, f"No such payment_intent: '{pi_id}'", code="resource_missing",
                              param="payment_intent")
        pi = self.intents[pi_id]
        if pi["status"] != "succeeded":
            raise StripeError(400, f"This PaymentIntent ({pi_id}) does not have a successful "
                              f"charge to refund (status {pi['status']}).",
                              code="payment_intent_unexpected_state", cache=True)
        remaining = pi["amount_received"] - self.refunded.get(pi_id, 0)
        amount = int_param(params, "amount")
        amount = remaining if amount is None else amount
        if remaining <= 0:
            raise StripeError(400, f"Charge {pi['latest_charge']} has already been refunded.",
                              code="charge_already_refunded", cache=True)
        if amount <= 0:
            raise StripeError(400, "Invalid positive integer", code="parameter_invalid_integer",
                              param="amount")
        if amount > remaining:
            cur = pi["currency"]
            raise StripeError(400, f"Refund amount ({display(amount, cur)}) is greater than "
                              f"unrefunded amount on charge ({display(remaining, cur)})",
                              code="amount_too_large", param="amount", cache=True)
        reason = params.get("reason") or None
        if reason not in (None, "duplicate", "fraudulent", "requested_by_customer"):
            raise StripeError(400, f"Invalid reason: {reason}.", param="reason")
        refund: Obj = {
            "id": "re_" + secrets.token_hex(12), "object": "refund", "amount": amount,
            "balance_transaction": None, "charge": pi["latest_charge"],
            "created": int(time.time()), "currency": pi["currency"],
            "metadata": metadata_param(params), "payment_intent": pi_id,
            "reason": reason, "receipt_number": None, "source_transfer_reversal": None,
            "status": "succeeded", "transfer_reversal": None,
            "idempotency_key": request.headers.get("Idempotency-Key"),
        }
        self.refunded[pi_id] = self.refunded.get(pi_id, 0) + amount
        self.refunds[refund["id"]] = refund
        return {k: v for k, v in refund.items() if k != "idempotency_key"}

    def retrieve_refund(self, params: Params, request: web.Request) -> Obj:
        refund = self.refunds.get(request.match_info["id"])
        if refund is None:
            raise StripeError(404, f"No such refund: '{request.match_info['id']}'",
                              code="resource_missing", param="id")
        return {k: v for k, v in refund.items() if k != "idempotency_key"}

    def list_refunds(self, params: Params, request: web.Request) -> Obj:
        rows = [{k: v for k, v in r.items() if k != "idempotency_key"}
                for r in reversed(self.refunds.values())]
        if params.get("payment_intent"):
            rows = [r for r in rows if r["payment_intent"] == params["payment_intent"]]
        return self._page(rows, params, "/v1/refunds")

    # --- ground truth ----------------------------------------------------------------------------

    def truth(self) -> dict[str, list[Obj]]:
        intents = [
            {"id": pi["id"], "status": pi["status"], "amount": pi["amount"],
             "currency": pi["currency"], "customer": pi["customer"],
             "amount_capturable": pi["amount_capturable"],
             "amount_received": pi["amount_received"],
             "amount_refunded": self.refunded.get(pi["id"], 0),
             "metadata": dict(pi["metadata"]),
             "idempotency_keys": list(self.keys.get(pi["id"], [])),
             "created": pi["created"]}
            for pi in self.intents.values()
        ]
        refunds = [json.loads(json.dumps(r)) for r in self.refunds.values()]
        return {"payment_intents": intents, "refunds": refunds}
