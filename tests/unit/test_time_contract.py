"""R7 time contracts: configuration overrides the connectors' documented defaults, and bad
configuration is refused with what to write."""

from __future__ import annotations

import pytest

from agentsaga.connectors.config import ConnectorConfig
from agentsaga.connectors.stripe import StripeConnector
from agentsaga.connectors.tools import register_all
from agentsaga.errors import ConfigurationError
from agentsaga.saga.registry import Registry
from agentsaga.time_contract import TimeContract, parse_overrides

WORLD = "http://127.0.0.1:9"
ENV = {"AGENTSAGA_JIRA_URL": WORLD, "AGENTSAGA_JIRA_PROJECT": "SUP",
       "AGENTSAGA_STRIPE_API_BASE": WORLD, "AGENTSAGA_STRIPE_API_KEY": "sk_test_x",
       "AGENTSAGA_CONNECTOR_TIMEOUT_S": "7"}


def test_each_connector_declares_its_systems_bounds() -> None:
    registry = register_all(Registry(), ENV)
    jira = registry.get("create_ticket").timing
    stripe = registry.get("charge_card").timing
    assert jira == TimeContract(7.0, 120.0, 0.0)  # no idempotency key: nothing deduplicated
    # Stripe's lookups are consistent (a list by `created` window, a retrieve by id): no lag
    assert stripe == TimeContract(7.0, 0.0, 24 * 3600.0)
    assert registry.get("capture_payment").timing == stripe


def test_unset_stripe_waits_as_long_as_stripes_own_client_and_the_others_ten_seconds() -> None:
    """A charge the card network holds commits whether or not the client still waits: the
    deadline is the longest Stripe's own client library waits, not a shorter wish."""
    env = {k: v for k, v in ENV.items() if k != "AGENTSAGA_CONNECTOR_TIMEOUT_S"}
    registry = register_all(Registry(), env)
    assert registry.get("charge_card").timing == TimeContract(80.0, 0.0, 24 * 3600.0)
    assert registry.get("capture_payment").timing.call_timeout_s == 80.0
    assert registry.get("create_ticket").timing == TimeContract(10.0, 120.0, 0.0)
    config = ConnectorConfig.from_env(env)
    assert config.stripe is not None and config.stripe.timeout_s == 80.0
    assert config.http.timeout_s == 10.0
    # the client enforces what the contract says (R7): the SDK's HTTP client is given it
    http_client = StripeConnector(config.stripe, config.http).client._requestor._client
    assert getattr(http_client, "_timeout", None) == 80.0


def test_configuration_overrides_a_tool_and_keeps_the_rest() -> None:
    env = {**ENV, "AGENTSAGA_TIME_CONTRACTS": '{"create_ticket": {"visible_within_s": 4}}'}
    registry = register_all(Registry(), env)
    assert registry.get("create_ticket").timing == TimeContract(7.0, 4.0, 0.0)
    assert registry.get("charge_card").timing.visible_within_s == 0.0


@pytest.mark.parametrize(("text", "says"), [
    ("{not json", "is not JSON"),
    ('{"create_ticket": 4}', "must map tool names"),
    ('{"create_ticket": {"lag_s": 4}}', "unknown field(s) lag_s"),
    ('{"create_ticket": {"visible_within_s": -1}}', "must be a number of seconds >= 0"),
    ('{"create_ticket": {"visible_within_s": "soon"}}', "must be a number of seconds, got"),
])
def test_bad_overrides_are_refused_naming_the_problem(text: str, says: str) -> None:
    with pytest.raises(ConfigurationError, match=says.replace("(", r"\(").replace(")", r"\)")):
        parse_overrides(text)
