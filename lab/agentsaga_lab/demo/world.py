"""The incident's world: the stand-ins, the faults of the essay, and the connector settings."""

from __future__ import annotations

import json

from agentsaga.connectors.tools import SEARCHED_TOOLS
from agentsaga_lab.world import Fault, World

CUSTOMER = "cus_1182"
CUSTOMER_EMAIL = "dana@example.com"
ORDER = "1182"
PROJECT = "SUP"


def connector_env(url: str, *, timeout_s: float = 2.0,
                  search_lag_s: float = 1.0) -> dict[str, str]:
    """`AGENTSAGA_*` settings pointing every connector at the world on `url`; the world's
    search lags at most `search_lag_s` (its time contract, R7)."""
    return {
        "AGENTSAGA_TIME_CONTRACTS": json.dumps(
            {tool: {"visible_within_s": search_lag_s} for tool in SEARCHED_TOOLS}),
        "AGENTSAGA_STRIPE_API_BASE": url, "AGENTSAGA_STRIPE_API_KEY": "sk_test_demo",
        "AGENTSAGA_JIRA_URL": url, "AGENTSAGA_JIRA_PROJECT": PROJECT,
        "AGENTSAGA_JIRA_EMAIL": "agent@shop.example", "AGENTSAGA_JIRA_TOKEN": "demo",
        "AGENTSAGA_EMAIL_URL": url, "AGENTSAGA_EMAIL_API_KEY": "re_demo",
        "AGENTSAGA_EMAIL_FROM": "support@shop.example",
        "AGENTSAGA_WAREHOUSE_URL": url, "AGENTSAGA_CONNECTOR_TIMEOUT_S": str(timeout_s),
    }


def arm(world: World) -> None:
    """Empty the world and set the incident's faults: Jira answers 504 after creating the first
    ticket, the warehouse rejects reships, search lags a little."""
    world.reset()
    world.set_search_lag(0.1)
    world.faults.add(Fault("POST", "/rest/api/3/issue", "commit_then_504", on_call=1))
    world.warehouse.reject_reships(True)
