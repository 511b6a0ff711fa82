"""A deterministic stand-in for the model: the plan of the refund-and-reship run, and the
model's habits the essay describes (it retries an error at once, with reworded arguments).
A real model would go through the same client calls."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentsaga_lab.demo.world import CUSTOMER, CUSTOMER_EMAIL, ORDER


@dataclass(frozen=True)
class Call:
    tool: str
    args: dict[str, Any]


SEARCH = Call("search_orders", {"order_id": ORDER})
TICKET = Call("create_ticket", {"summary": "Refund for order 1182", "order_id": ORDER})
TICKET_REWORDED = Call("create_ticket", {"summary": "Order #1182 refund", "order_id": ORDER})
CHARGE = Call("charge_card", {"customer_id": CUSTOMER, "amount": 500, "currency": "usd",
                              "reason": "Re-shipping fee for order 1182", "order_id": ORDER,
                              "receipt": False})
RESHIP = Call("reship", {"order_id": ORDER, "items": ["sku-42"], "reason": "lost in transit"})
APOLOGY = Call("send_email", {
    "to": [CUSTOMER_EMAIL], "subject": "About your order 1182",
    "body": "We charged you a re-shipping fee by mistake, and it has been refunded."})

PLAN = [SEARCH, TICKET, CHARGE, RESHIP]
"""The run's plan, in order."""


def retry_of(call: Call) -> Call:
    """What the model sends after an error: the same intent in new words."""
    return TICKET_REWORDED if call == TICKET else call
