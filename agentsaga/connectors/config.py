"""What each connector is given: the configured systems, derived from the settings group
`agentsaga.settings.ConnectorSettings` (the `AGENTSAGA_STRIPE_*`, `_JIRA_*`, `_ZENDESK_*`,
`_EMAIL_*`, `_WAREHOUSE_URL`, `_HTTP_TOOLS`, `_CONNECTOR_TIMEOUT_S` and `_SEARCH_RATE` variables,
credentials also from mounted Secret files), never from code.

A system whose URL is unset is simply not configured; its tools are not registered.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from agentsaga.environment import load
from agentsaga.errors import ConfigurationError
from agentsaga.settings import ConnectorSettings
from agentsaga.time_contract import parse_overrides

DEFAULT_TIMEOUT_S = 10.0
"""A connector request's timeout unless AGENTSAGA_CONNECTOR_TIMEOUT_S says otherwise."""
STRIPE_TIMEOUT_S = 80.0
"""Stripe's: the timeout Stripe's own client library gives every request (stripe-python's
`RequestsClient(timeout=80)`, external-apis.md §1). A card network can hold a charge for many
seconds, and the server commits it whether or not the client still waits: a client that gives up
sooner turns a slow charge into an unknown one, and its deadline (R7) into a bound the charge
can outlive."""


@dataclass(frozen=True)
class HttpSettings:
    timeout_s: float = DEFAULT_TIMEOUT_S
    """Every request's timeout (connect, read, write, pool)."""
    search_rate: float = 20.0
    """Search requests per second this process allows itself (Stripe: 20/s on search)."""
    max_backoffs: int = 6
    """How often a lookup is retried after a 429 before it gives up (it then fails: UNKNOWN)."""


@dataclass(frozen=True)
class StripeConfig:
    api_key: str
    api_base: str | None = None
    """None: Stripe's own address."""
    timeout_s: float = STRIPE_TIMEOUT_S
    """Every Stripe request's timeout: charge_card's `call_timeout_s`."""


@dataclass(frozen=True)
class JiraConfig:
    url: str
    project: str
    email: str = ""
    token: str = ""
    issue_type: str = "Task"


@dataclass(frozen=True)
class ZendeskConfig:
    url: str
    email: str = ""
    token: str = ""


@dataclass(frozen=True)
class EmailConfig:
    url: str
    sender: str
    api_key: str = ""


@dataclass(frozen=True)
class WarehouseConfig:
    url: str


@dataclass(frozen=True)
class ConnectorConfig:
    http: HttpSettings
    stripe: StripeConfig | None = None
    jira: JiraConfig | None = None
    zendesk: ZendeskConfig | None = None
    email: EmailConfig | None = None
    warehouse: WarehouseConfig | None = None
    http_tools: str | None = None
    """Path of the generic HTTP tools file."""
    time_contracts: dict[str, dict[str, float]] = field(default_factory=dict)
    """R7: per-tool overrides of the connectors' time contracts (`AGENTSAGA_TIME_CONTRACTS`)."""

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ConnectorConfig:
        return cls.from_settings(load(ConnectorSettings, env))

    @classmethod
    def from_settings(cls, s: ConnectorSettings) -> ConnectorConfig:
        """The configured systems; a system needs its URL, and some need more (said here)."""
        http = HttpSettings(timeout_s=DEFAULT_TIMEOUT_S if s.timeout_s is None else s.timeout_s,
                            search_rate=s.search_rate)
        stripe = None
        if s.stripe_api_key or s.stripe_api_base:
            if not s.stripe_api_key:
                raise ConfigurationError(
                    "AGENTSAGA_STRIPE_API_BASE is set but no AGENTSAGA_STRIPE_API_KEY(_FILE)")
            stripe = StripeConfig(api_key=s.stripe_api_key, api_base=s.stripe_api_base,
                                  timeout_s=STRIPE_TIMEOUT_S if s.timeout_s is None
                                  else s.timeout_s)
        jira = None
        if s.jira_url:
            if not s.jira_project:
                raise ConfigurationError("AGENTSAGA_JIRA_URL is set but AGENTSAGA_JIRA_PROJECT "
                                         "is not: name the project tickets are created in")
            jira = JiraConfig(url=s.jira_url.rstrip("/"), project=s.jira_project,
                              email=s.jira_email, token=s.jira_token,
                              issue_type=s.jira_issue_type)
        zendesk = None
        if s.zendesk_url:
            zendesk = ZendeskConfig(url=s.zendesk_url.rstrip("/"), email=s.zendesk_email,
                                    token=s.zendesk_token)
        email = None
        if s.email_url:
            if not s.email_from:
                raise ConfigurationError("AGENTSAGA_EMAIL_URL is set but AGENTSAGA_EMAIL_FROM "
                                         "is not: name the sender address")
            email = EmailConfig(url=s.email_url.rstrip("/"), sender=s.email_from,
                                api_key=s.email_api_key)
        warehouse = None
        if s.warehouse_url:
            warehouse = WarehouseConfig(url=s.warehouse_url.rstrip("/"))
        return cls(http=http, stripe=stripe, jira=jira, zendesk=zendesk, email=email,
                   warehouse=warehouse, http_tools=s.http_tools,
                   time_contracts=parse_overrides(s.time_contracts))
