"""The local world: stateful stand-ins of Stripe, Jira Cloud, Zendesk, an email API (+ SMTP) and a
warehouse, served over HTTP on loopback for the real clients, with fault injection and a
ground-truth view. For tests and for `agentsaga world`; the product itself never imports it.

    from agentsaga_lab.world import World, Fault

    with World(search_lag=0.2) as world:
        client = stripe.StripeClient("sk_test_x", base_addresses={"api": world.url})
        world.faults.add(Fault("POST", "/v1/payment_intents", "commit_then_reset", on_call=1))
        ...
        assert len(world.truth()["payment_intents"]) == 1
"""

from agentsaga_lab.world.faults import FAULT_KINDS, Fault, FaultKind, FaultSet
from agentsaga_lab.world.index import ManualClock, WorldConfig
from agentsaga_lab.world.server import World

__all__ = ["FAULT_KINDS", "Fault", "FaultKind", "FaultSet", "ManualClock", "World", "WorldConfig"]
