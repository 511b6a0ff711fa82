"""The local world: stateful stand-ins of Stripe, Jira Cloud, Zendesk, an email API (+ SMTP) and a
warehouse, served over HTTP on loopback for the real clients, with fault injection and a
ground-truth view. For tests and for `agentsaga world`; the product itself never imports it.

    from agentsaga.world import World, Fault

    with World(search_lag=0.2) as world:
        client = stripe.StripeClient("sk_test_x", base_addresses={"api": world.url})
        world.faults.add(Fault("POST", "/v1/payment_intents", "commit_then_reset", on_call=1))
        ...
        assert len(world.truth()["payment_intents"]) == 1
"""

from agentsaga.extras import require

require("demo", "aiohttp", "aiosmtpd", what="the local world")

from agentsaga.world.faults import FAULT_KINDS, Fault, FaultKind, FaultSet  # noqa: E402
from agentsaga.world.index import ManualClock, WorldConfig  # noqa: E402
from agentsaga.world.server import World  # noqa: E402

__all__ = ["FAULT_KINDS", "Fault", "FaultKind", "FaultSet", "ManualClock", "World", "WorldConfig"]
