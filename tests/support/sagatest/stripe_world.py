"""The official `stripe` SDK pointed at the local world's Stripe stand-in."""

from __future__ import annotations

from typing import Any, cast

import stripe
from stripe.params import PaymentIntentCreateParams

from agentsaga_lab.world import World


def client(world: World, *, timeout: float = 5.0) -> stripe.StripeClient:
    return stripe.StripeClient(
        "sk_test_world", base_addresses={"api": world.url}, max_network_retries=0,
        http_client=stripe.RequestsClient(timeout=timeout),
    )


def authorise(sc: stripe.StripeClient, key: str, amount: int = 500, **extra: Any) -> Any:
    params: dict[str, Any] = {
        "amount": amount, "currency": "usd", "capture_method": "manual", "confirm": True,
        "payment_method": "pm_card_visa", "metadata": {"saga_key": key}, **extra,
    }
    return sc.v1.payment_intents.create(params=cast(PaymentIntentCreateParams, params),
                                        options={"idempotency_key": key})
