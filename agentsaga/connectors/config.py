"""Connector settings from `AGENTSAGA_*` variables and mounted Secret files, never from code.

    AGENTSAGA_STRIPE_API_BASE   AGENTSAGA_STRIPE_API_KEY(_FILE)
    AGENTSAGA_JIRA_URL          AGENTSAGA_JIRA_EMAIL  AGENTSAGA_JIRA_TOKEN(_FILE)
    AGENTSAGA_JIRA_PROJECT      AGENTSAGA_JIRA_ISSUE_TYPE (default Task)
    AGENTSAGA_ZENDESK_URL       AGENTSAGA_ZENDESK_EMAIL  AGENTSAGA_ZENDESK_TOKEN(_FILE)
    AGENTSAGA_EMAIL_URL         AGENTSAGA_EMAIL_API_KEY(_FILE)  AGENTSAGA_EMAIL_FROM
    AGENTSAGA_WAREHOUSE_URL
    AGENTSAGA_HTTP_TOOLS        a YAML/JSON file of generic HTTP tools (`connectors.http`)
    AGENTSAGA_CONNECTOR_TIMEOUT_S   per-request timeout (default 10)
    AGENTSAGA_SEARCH_RATE       lookups per second allowed against search APIs (default 20)

A system whose URL is unset is simply not configured; its tools are not registered.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from agentsaga.errors import ConfigurationError
from agentsaga.settings import read_secret


@dataclass(frozen=True)
class HttpSettings:
    timeout_s: float = 10.0
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

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ConnectorConfig:
        def number(name: str, default: float) -> float:
            raw = env.get(name)
            if not raw:
                return default
            try:
                value = float(raw)
            except ValueError:
                raise ConfigurationError(f"{name}={raw!r} is not a number") from None
            if value <= 0:
                raise ConfigurationError(f"{name}={raw!r} must be positive")
            return value

        http = HttpSettings(timeout_s=number("AGENTSAGA_CONNECTOR_TIMEOUT_S", 10.0),
                            search_rate=number("AGENTSAGA_SEARCH_RATE", 20.0))
        stripe = None
        stripe_key = read_secret(env, "AGENTSAGA_STRIPE_API_KEY")
        stripe_base = env.get("AGENTSAGA_STRIPE_API_BASE") or None
        if stripe_key or stripe_base:
            if not stripe_key:
                raise ConfigurationError(
                    "AGENTSAGA_STRIPE_API_BASE is set but no AGENTSAGA_STRIPE_API_KEY(_FILE)")
            stripe = StripeConfig(api_key=stripe_key, api_base=stripe_base)
        jira = None
        if env.get("AGENTSAGA_JIRA_URL"):
            project = env.get("AGENTSAGA_JIRA_PROJECT")
            if not project:
                raise ConfigurationError("AGENTSAGA_JIRA_URL is set but AGENTSAGA_JIRA_PROJECT "
                                         "is not: name the project tickets are created in")
            jira = JiraConfig(url=env["AGENTSAGA_JIRA_URL"].rstrip("/"), project=project,
                              email=env.get("AGENTSAGA_JIRA_EMAIL", ""),
                              token=read_secret(env, "AGENTSAGA_JIRA_TOKEN") or "",
                              issue_type=env.get("AGENTSAGA_JIRA_ISSUE_TYPE") or "Task")
        zendesk = None
        if env.get("AGENTSAGA_ZENDESK_URL"):
            zendesk = ZendeskConfig(url=env["AGENTSAGA_ZENDESK_URL"].rstrip("/"),
                                    email=env.get("AGENTSAGA_ZENDESK_EMAIL", ""),
                                    token=read_secret(env, "AGENTSAGA_ZENDESK_TOKEN") or "")
        email = None
        if env.get("AGENTSAGA_EMAIL_URL"):
            sender = env.get("AGENTSAGA_EMAIL_FROM")
            if not sender:
                raise ConfigurationError("AGENTSAGA_EMAIL_URL is set but AGENTSAGA_EMAIL_FROM "
                                         "is not: name the sender address")
            email = EmailConfig(url=env["AGENTSAGA_EMAIL_URL"].rstrip("/"), sender=sender,
                                api_key=read_secret(env, "AGENTSAGA_EMAIL_API_KEY") or "")
        warehouse = None
        if env.get("AGENTSAGA_WAREHOUSE_URL"):
            warehouse = WarehouseConfig(url=env["AGENTSAGA_WAREHOUSE_URL"].rstrip("/"))
        return cls(http=http, stripe=stripe, jira=jira, zendesk=zendesk, email=email,
                   warehouse=warehouse, http_tools=env.get("AGENTSAGA_HTTP_TOOLS") or None)
