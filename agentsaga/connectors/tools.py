"""The standard tool set, registered from configuration: `agentsaga sidecar --tools
agentsaga.connectors.tools` serves every system whose URL is configured (see `config`).

    tool                     class          system     compensation / note
    search_orders            pure           warehouse
    create_ticket_draft      reversible     tickets    delete_ticket_draft (staged, unseen)
    create_ticket            compensatable  tickets    close_ticket (the team saw it)
    open_ticket              compensatable  tickets    close_ticket; commit step (R10)
    charge_card              compensatable  stripe     cancel_or_refund_payment (authorise only)
    capture_payment          compensatable  stripe     cancel_or_refund_payment; commit step
    create_email_draft       reversible     email      delete_email_draft
    send_email               irreversible   email      a queued correction, never automatic
    send_correction          irreversible   email      sends an approved correction (R9)
    reship                   compensatable  warehouse  cancel_reship (until picked)
    close_ticket, delete_ticket_draft, cancel_or_refund_payment, delete_email_draft,
    cancel_reship            irreversible   counter-actions: unwind runs them under their own
                                            keys (R8); an agent calling one directly needs
                                            approval at the pivot, since nothing undoes an undo

Tickets go to Jira when `AGENTSAGA_JIRA_URL` is set, else to Zendesk.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol

from agentsaga.connectors import http as generic_http
from agentsaga.connectors.config import ConnectorConfig
from agentsaga.connectors.email import EmailConnector
from agentsaga.connectors.jira import JiraTickets
from agentsaga.connectors.stripe_currencies import Amount, Currency, at_least_the_minimum
from agentsaga.connectors.warehouse import WarehouseConnector
from agentsaga.connectors.zendesk import ZendeskTickets
from agentsaga.errors import Rejected
from agentsaga.extras import require
from agentsaga.saga.registry import (
    JSON,
    NO_LOOKUP,
    Compensation,
    Effect,
    LookupContext,
    Registry,
    ref,
)
from agentsaga.time_contract import DEFAULT as DEFAULT_TIMING
from agentsaga.time_contract import TimeContract

if TYPE_CHECKING:  # the Stripe SDK is the [stripe] extra: imported only when Stripe is configured
    from agentsaga.connectors.stripe import StripeConnector

# R7: each system's time contract. `call_timeout_s` is the connector's own client timeout
# (AGENTSAGA_CONNECTOR_TIMEOUT_S, enforced by its HTTP client; unset, Stripe's is Stripe's client
# default, `config.STRIPE_TIMEOUT_S`); the rest is what the system
# documents (../shared/reference/external-apis.md); AGENTSAGA_TIME_CONTRACTS overrides per tool.
STRIPE_DEDUPES_S = 24 * 3600.0
"""Stripe keeps an idempotency key at least 24 h (docs.stripe.com/idempotency: keys "can" be
removed once they are at least 24 hours old)."""
STRIPE_LIST_LAG_S = 0.0
"""Stripe's list endpoints are consistent: "for immediate consistency, use the list APIs"
(docs.stripe.com/search; external-apis.md §1.4); charge_card is found by listing a `created`
window and capture_payment by retrieving its PaymentIntent, never by the Search API (which is
searchable "in under 1 minute", up to an hour behind during outages)."""
JIRA_SEARCH_LAG_S = 120.0
"""Jira `search/jql` is not read-after-write consistent: "a few seconds to minutes", most
"within seconds" (developer.atlassian.com/cloud/jira/platform/search-and-reconcile). It bounds
only a step whose issue id is unknown: a known id is read by `GET issue/{id}` (consistent)."""
JIRA_DEDUPES_S = 0.0
"""Jira Cloud REST v3 takes no idempotency key for issue creation: a re-send is a new issue."""
ZENDESK_DEDUPES_S = 2 * 3600.0
"""Zendesk keeps a ticket-create `Idempotency-Key` about 2 hours (developer.zendesk.com
ticketing introduction #idempotency; the retention is from integration notes)."""
ZENDESK_LOOKUP_LAG_S = 180.0
"""Zendesk's `tickets?external_id=` is probably consistent (unverified); its search index
takes "up to a few minutes": the lookup is bounded by the latter."""
EMAIL_DEDUPES_S = 24 * 3600.0
"""Resend-like email APIs keep an `Idempotency-Key` 24 hours (resend.com/docs idempotency)."""
EMAIL_LOOKUP_LAG_S = 60.0
"""The send log lags like a search index (the email stand-in's documented behaviour)."""


SEARCHED_TOOLS = ("create_ticket", "create_ticket_draft", "send_email", "send_correction")
"""The tools whose lookup may need a search (it lags): their `visible_within_s` is the index's
lag. The Stripe tools are not among them: their lookups are consistent."""


def ticket_timing(system: str, timeout_s: float) -> TimeContract:
    if system == "jira":
        return TimeContract(timeout_s, JIRA_SEARCH_LAG_S, JIRA_DEDUPES_S)
    return TimeContract(timeout_s, ZENDESK_LOOKUP_LAG_S, ZENDESK_DEDUPES_S)

ROLLBACK_REASON = "Rolled back: the agent run that created this was unwound"

# The pre-written corrections a human can approve (R9); `{about}` is the original's reference.
CORRECTION_TEMPLATES: dict[str, str] = {
    "correction": "Please disregard our previous message: it was sent in error. We are sorry "
                  "for the confusion.",
    "charge_card_reversed": "We reversed a charge ({about}) that was made in error. You will "
                            "see the refund on your statement within a few days.",
    "capture_payment_reversed": "We refunded a payment ({about}) that was taken in error.",
}


class Tickets(Protocol):
    system: str

    def create(self, summary: str, order_id: str, description: str, key: str, *,
               draft: bool) -> Effect: ...
    def find_many(self, keys: Sequence[str]) -> dict[str, Effect]: ...
    def find_steps(self, steps: Sequence[LookupContext]) -> dict[str, Effect]: ...
    def open(self, ticket: str, key: str) -> Effect: ...
    def close(self, ticket: str, key: str, reason: str) -> Effect: ...
    def delete(self, ticket: str, key: str) -> Effect: ...


class Finder(Protocol):
    def find_many(self, keys: Sequence[str]) -> dict[str, Effect]: ...


def _one(finder: Finder) -> Callable[[str], Effect | None]:
    return lambda key: finder.find_many([key]).get(key)


def _target(finder: Finder, ref_value: str | None, by_key: str | None, what: str) -> str:
    """The external id to act on: given (a resolved `ref`), or found by the forward key."""
    if ref_value:
        return ref_value
    if by_key:
        found = finder.find_many([by_key]).get(by_key)
        if found is None or found.ref is None:
            raise Rejected(f"no {what} carries the key {by_key}: nothing to act on")
        return found.ref
    raise Rejected(f"name the {what}: pass its id or by_key=")


def register_tickets(registry: Registry, tickets: Tickets,
                     timing: TimeContract = DEFAULT_TIMING) -> None:
    def create_ticket(summary: str, order_id: str, idempotency_key: str,
                      description: str = "") -> Effect:
        """Create a ticket in the support team's queue."""
        return tickets.create(summary, order_id, description, idempotency_key, draft=False)

    def create_ticket_draft(summary: str, order_id: str, idempotency_key: str,
                            description: str = "") -> Effect:
        """Stage a ticket, not yet in the team's queue (open it after the pivot)."""
        return tickets.create(summary, order_id, description, idempotency_key, draft=True)

    def open_ticket(ticket: str, idempotency_key: str) -> Effect:
        """Commit step: move a staged ticket into the team's queue."""
        return tickets.open(ticket, idempotency_key)

    def close_ticket(idempotency_key: str, ticket: str | None = None, by_key: str | None = None,
                     reason: str = ROLLBACK_REASON) -> Effect:
        """Close a ticket with a reason (closing a closed ticket changes nothing)."""
        return tickets.close(_target(tickets, ticket, by_key, "ticket"), idempotency_key, reason)

    def delete_ticket_draft(idempotency_key: str, ticket: str | None = None,
                            by_key: str | None = None) -> Effect:
        """Discard a staged ticket."""
        return tickets.delete(_target(tickets, ticket, by_key, "ticket"), idempotency_key)

    def close_comp(args: JSON, key: str) -> Compensation:
        return Compensation("close_ticket", {"ticket": ref(key), "by_key": key,
                                             "reason": ROLLBACK_REASON})

    find, many, steps = _one(tickets), tickets.find_many, tickets.find_steps
    registry.register(create_ticket, cls="compensatable", audience=["support_team"],
                      compensate=close_comp, lookup=find, lookup_many=many, lookup_steps=steps,
                      timing=timing)
    registry.register(create_ticket_draft, cls="reversible", audience=["agent"],
                      compensate=lambda a, k: Compensation(
                          "delete_ticket_draft", {"ticket": ref(k), "by_key": k}),
                      lookup=find, lookup_many=many, lookup_steps=steps, timing=timing)
    registry.register(open_ticket, cls="compensatable", audience=["support_team"],
                      compensate=lambda a, k: Compensation(
                          "close_ticket", {"ticket": str(a["ticket"]), "reason": ROLLBACK_REASON}),
                      lookup=NO_LOOKUP, commit_step=True)
    registry.register(close_ticket, cls="irreversible", audience=["support_team"],
                      lookup=NO_LOOKUP)
    registry.register(delete_ticket_draft, cls="irreversible", audience=["agent"],
                      lookup=NO_LOOKUP)


def register_stripe(registry: Registry, stripe: StripeConnector) -> None:
    timing = TimeContract(stripe.timeout_s, STRIPE_LIST_LAG_S, STRIPE_DEDUPES_S)

    def charge_card(customer_id: str, amount: Amount, idempotency_key: str,
                    currency: Currency = "usd", reason: str = "", order_id: str = "",
                    payment_method: str = "pm_card_visa", receipt: bool = False) -> Effect:
        """Authorise a card payment (manual capture: a hold until capture_payment)."""
        return stripe.charge_card(customer_id, amount, idempotency_key, currency=currency,
                                  reason=reason, order_id=order_id,
                                  payment_method=payment_method, receipt=receipt)

    def capture_payment(payment_intent: str, idempotency_key: str,
                        amount: Amount | None = None, receipt: bool = False) -> Effect:
        """Commit step: capture an authorised payment."""
        return stripe.capture_payment(payment_intent, idempotency_key, amount=amount,
                                      receipt=receipt)

    def cancel_or_refund_payment(idempotency_key: str, payment: str | None = None,
                                 charge_key: str | None = None, amount: Amount | None = None,
                                 reason: Literal["duplicate", "fraudulent",
                                                 "requested_by_customer"] = "requested_by_customer",
                                 ) -> Effect:
        """Cancel an authorisation, or refund a captured payment."""
        return stripe.cancel_or_refund_payment(idempotency_key, payment=payment,
                                               charge_key=charge_key, amount=amount,
                                               reason=reason)

    def payer(args: JSON) -> list[str]:  # R9: the customer sees it only with receipts on
        return ["customer"] if args.get("receipt") else ["finance"]

    def undo_charge(args: JSON, key: str) -> Compensation:
        return Compensation("cancel_or_refund_payment",
                            {"payment": ref(key), "charge_key": key, "amount": int(args["amount"])})

    registry.register(charge_card, cls="compensatable", audience=payer, compensate=undo_charge,
                      lookup=stripe.find, lookup_many=stripe.find_many,
                      lookup_steps=stripe.find_charges, timing=timing,
                      check=at_least_the_minimum)
    registry.register(capture_payment, cls="compensatable", audience=payer,
                      compensate=lambda a, k: Compensation(
                          "cancel_or_refund_payment", {"payment": str(a["payment_intent"])}),
                      lookup=stripe.find_capture, lookup_steps=stripe.find_captures,
                      commit_step=True, timing=timing)
    registry.register(cancel_or_refund_payment, cls="irreversible", audience=["finance"],
                      lookup=NO_LOOKUP)


def register_email(registry: Registry, email: EmailConnector, timeout_s: float) -> None:
    timing = TimeContract(timeout_s, EMAIL_LOOKUP_LAG_S, EMAIL_DEDUPES_S)

    def create_email_draft(to: list[str] | str, subject: str, body: str,
                           idempotency_key: str) -> Effect:
        """Draft an email; nobody sees it until it is sent."""
        return email.create_draft(to, subject, body, idempotency_key)

    def delete_email_draft(draft: str, idempotency_key: str) -> Effect:
        """Delete a draft (a draft already gone is fine)."""
        return email.delete_draft(draft, idempotency_key)

    def send_email(to: list[str] | str, subject: str, body: str, idempotency_key: str,
                   correction_template: str = "") -> Effect:
        """Send an email. Irreversible: name the correction template to use if it was wrong."""
        return email.send(to, subject, body, idempotency_key)

    def send_correction(template: str, to: list[str], idempotency_key: str, subject: str = "",
                        original_key: str = "", about: str | None = None) -> Effect:
        """Send an approved correction (R9); only `agentsaga corrections --send` calls it."""
        text = CORRECTION_TEMPLATES.get(template)
        if text is None:
            raise Rejected(f"no correction template {template!r}; known: "
                           f"{', '.join(sorted(CORRECTION_TEMPLATES))}")
        not_addresses = [r for r in to if "@" not in r]
        if not to or not_addresses:
            raise Rejected(f"correction recipients {not_addresses or to!r} are not email "
                           "addresses; dismiss this correction and write to the customer")
        return email.send(to, subject or "A correction", text.format(about=about or "-"),
                          idempotency_key)

    def correction(args: JSON, key: str) -> Compensation:
        to = args["to"]
        return Compensation("send_correction", {
            "template": args.get("correction_template") or "correction",
            "to": [to] if isinstance(to, str) else list(to),
            "subject": f"Correction: {args['subject']}", "original_key": key})

    registry.register(create_email_draft, cls="reversible", audience=["agent"],
                      compensate=lambda a, k: Compensation("delete_email_draft",
                                                           {"draft": ref(k)}),
                      lookup=NO_LOOKUP)
    registry.register(delete_email_draft, cls="irreversible", audience=["agent"],
                      lookup=NO_LOOKUP)
    registry.register(send_correction, cls="irreversible", audience=["customer"],
                      lookup=_one(email), lookup_many=email.find_many,
                      lookup_steps=email.find_steps, timing=timing)
    registry.register(send_email, cls="irreversible", audience=["customer"],
                      compensate=correction, lookup=_one(email), lookup_many=email.find_many,
                      lookup_steps=email.find_steps, commit_step=True, timing=timing)


def register_warehouse(registry: Registry, warehouse: WarehouseConnector,
                       timeout_s: float) -> None:
    # the warehouse lists reships from its database (consistent) and honours Idempotency-Key
    # for as long as it keeps the reship row
    timing = TimeContract(timeout_s, 0.0, 0.0)

    def search_orders(order_id: str) -> dict[str, Any]:
        """Look up an order at the warehouse (pure)."""
        return warehouse.order(order_id)

    def reship(order_id: str, idempotency_key: str, items: list[str] | None = None,
               reason: str = "") -> Effect:
        """Ask the warehouse to ship an order again."""
        return warehouse.reship(order_id, items or [], reason, idempotency_key)

    def cancel_reship(reship: str, idempotency_key: str) -> Effect:
        """Cancel a reship that has not been picked yet."""
        return warehouse.cancel(reship, idempotency_key)

    registry.register(search_orders, cls="pure")
    registry.register(reship, cls="compensatable", audience=["warehouse"],
                      compensate=lambda a, k: Compensation("cancel_reship", {"reship": ref(k)}),
                      lookup=_one(warehouse), lookup_many=warehouse.find_many, timing=timing)
    registry.register(cancel_reship, cls="irreversible", audience=["warehouse"],
                      lookup=NO_LOOKUP)


def register_all(registry: Registry, env: Mapping[str, str] = os.environ) -> Registry:
    """Register the tools of every configured system into `registry` (and return it)."""
    config = ConnectorConfig.from_env(env)
    if config.warehouse:
        register_warehouse(registry, WarehouseConnector(config.warehouse, config.http),
                           config.http.timeout_s)
    if config.jira:
        register_tickets(registry, JiraTickets(config.jira, config.http),
                         ticket_timing("jira", config.http.timeout_s))
    elif config.zendesk:
        register_tickets(registry, ZendeskTickets(config.zendesk, config.http),
                         ticket_timing("zendesk", config.http.timeout_s))
    if config.stripe:
        require("stripe", "stripe", what="the Stripe tools (AGENTSAGA_STRIPE_* is set)")
        from agentsaga.connectors.stripe import StripeConnector

        register_stripe(registry, StripeConnector(config.stripe, config.http))
    if config.email:
        register_email(registry, EmailConnector(config.email, config.http),
                       config.http.timeout_s)
    if config.http_tools:
        generic_http.register_file(registry, config.http_tools, config.http, env)
    registry.override_timing(config.time_contracts)  # configuration over the defaults (R7)
    return registry


registry = register_all(Registry())
"""The default tool set from this process's environment (`--tools agentsaga.connectors.tools`)."""
