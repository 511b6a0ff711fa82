"""`agentsaga connectors check`: does each configured account have what its connector relies on?

Only read-only requests are sent (GETs, and the searches the lookups use), the ones each
connector needs to work at all: authentication, the lookup by key that reconcile uses (R7), and
the account settings behind the markers and compensations (R4, R6). Nothing is created.

    system   check           request                                          needed for
    stripe   authentication  GET /v1/payment_intents?limit=1                  every call, and
                                                                              reconcile's list
             search          GET /v1/payment_intents/search (metadata query)  lookup by key alone
                                                                              (undo by charge_key)
    jira     authentication  GET /rest/api/3/myself                           every call
             project         GET /rest/api/3/project/{key}                    create_ticket
             labels          GET .../createmeta/{key}/issuetypes/{id}         the saga-<key> label
             done            GET /rest/api/3/project/{key}/statuses           close_ticket
             search          POST /rest/api/3/search/jql (label query)        lookup by label
    zendesk  authentication  GET /api/v2/users/me.json (an agent)             every call
             lookup          GET /api/v2/tickets.json?external_id=            lookup by key
    email    lookup          GET /emails?limit=1                              lookup of sent mail

Each failed check says what is missing and what to change in the account.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agentsaga.connectors.config import (
    ConnectorConfig,
    EmailConfig,
    JiraConfig,
    StripeConfig,
    ZendeskConfig,
)
from agentsaga.connectors.email import EmailConnector
from agentsaga.connectors.jira import JiraTickets, label
from agentsaga.connectors.paths import segment
from agentsaga.connectors.zendesk import ZendeskTickets
from agentsaga.errors import OutcomeUnknown, Rejected
from agentsaga.extras import require

if TYPE_CHECKING:  # the Stripe SDK is the [stripe] extra
    from agentsaga.connectors.stripe import StripeConnector

PROBE_KEY = "agentsaga-connectors-check"
"""The key the lookups search for: no real step has it, so every search finds nothing."""


@dataclass(frozen=True)
class Check:
    system: str
    name: str
    ok: bool
    detail: str

    def line(self) -> str:
        return f"{'ok  ' if self.ok else 'FAIL'}  {self.system:<8} {self.name:<15} {self.detail}"


class Failed(Exception):
    """A check found the account lacking; the message says what to change."""


def _run(system: str, name: str, probe: Callable[[], str]) -> Check:
    try:
        return Check(system, name, True, probe())
    except Failed as exc:
        return Check(system, name, False, str(exc))
    except (Rejected, OutcomeUnknown) as exc:
        return Check(system, name, False, f"{exc}")


def check_stripe(config: StripeConfig, connector: StripeConnector) -> Iterator[Check]:
    import stripe

    from agentsaga.connectors.stripe import reason

    client = connector.client

    def auth() -> str:
        try:
            client.v1.payment_intents.list(params={"limit": 1})
        except stripe.AuthenticationError as exc:
            raise Failed(f"the API key was refused ({reason(exc)}); set "
                         "AGENTSAGA_STRIPE_API_KEY(_FILE) to a secret or restricted key") from exc
        except stripe.PermissionError as exc:
            raise Failed(f"the key may not read PaymentIntents ({reason(exc)}); give the "
                         "restricted key PaymentIntents write and Refunds write") from exc
        except stripe.StripeError as exc:
            raise Failed(f"listing PaymentIntents failed: {reason(exc)}") from exc
        return "the key can list PaymentIntents"

    def search() -> str:
        query = f"metadata['saga_key']:'{PROBE_KEY}'"
        try:
            client.v1.payment_intents.search(params={"query": query, "limit": 1})
        except stripe.StripeError as exc:
            raise Failed(f"Stripe's Search API is not usable on this account ({reason(exc)}); "
                         "reconcile finds charges by metadata.saga_key through it, so unknown "
                         "charges would stay UNKNOWN. Search is not offered to every account "
                         "(docs.stripe.com/search): ask Stripe to enable it") from exc
        return "search by metadata answers"

    yield _run("stripe", "authentication", auth)
    yield _run("stripe", "search", search)


def check_jira(config: JiraConfig, tickets: JiraTickets) -> Iterator[Check]:
    api, base = tickets.api, "/rest/api/3"
    found: dict[str, Any] = {}

    def auth() -> str:
        try:
            me = api.call("GET", f"{base}/myself")
        except Rejected as exc:
            raise Failed(f"{exc}; set AGENTSAGA_JIRA_EMAIL and AGENTSAGA_JIRA_TOKEN(_FILE) to "
                         "an Atlassian account's email and API token") from exc
        return f"signed in as {me.get('displayName') or me.get('accountId')}"

    def project() -> str:
        try:
            found["project"] = api.call("GET", f"{base}/project/{segment(config.project)}")
        except Rejected as exc:
            raise Failed(f"project {config.project!r} is not visible ({exc}); set "
                         "AGENTSAGA_JIRA_PROJECT to a project key this account can browse") \
                from exc
        types = {t.get("name"): t.get("id") for t in found["project"].get("issueTypes", [])}
        if config.issue_type not in types:
            raise Failed(f"project {config.project} has no issue type {config.issue_type!r} "
                         f"(it has {', '.join(sorted(map(str, types)))}); set "
                         "AGENTSAGA_JIRA_ISSUE_TYPE")
        found["type_id"] = types[config.issue_type]
        return f"project {config.project}, issue type {config.issue_type}"

    def labels() -> str:
        if "type_id" not in found:
            raise Failed("skipped: the project check failed")
        meta = api.call("GET", f"{base}/issue/createmeta/{segment(config.project)}/issuetypes/"
                               f"{segment(found['type_id'])}")
        fields = {f.get("fieldId") for f in meta.get("fields", meta.get("results", []))}
        if "labels" not in fields:
            raise Failed(f"the create screen of {config.project}/{config.issue_type} has no "
                         "Labels field: tickets carry their key as the label saga-<key> (R4), "
                         "without it a ticket whose create timed out cannot be found; add Labels "
                         "to the create screen")
        return "the create screen has Labels"

    def done() -> str:
        if "type_id" not in found:
            raise Failed("skipped: the project check failed")
        rows = api.call("GET", f"{base}/project/{segment(config.project)}/statuses")
        statuses: list[dict[str, Any]] = next((r.get("statuses", []) for r in rows
                         if r.get("id") == found["type_id"]), [])
        finished = [s.get("name") for s in statuses
                    if (s.get("statusCategory") or {}).get("key") == "done"]
        if not finished:
            raise Failed(f"the workflow of {config.project}/{config.issue_type} has no status in "
                         "the Done category: close_ticket, the compensation of create_ticket, "
                         "could not close a ticket; add a Done status and a transition to it")
        return f"the workflow reaches {', '.join(map(str, finished))}"

    def search() -> str:
        page = api.call("POST", f"{base}/search/jql", json_body={
            "jql": f'labels = "{label(PROBE_KEY)}"', "fields": ["labels"], "maxResults": 1})
        if "issues" not in page:
            raise Failed("search/jql answered without `issues`")
        return "JQL search by label answers"

    yield _run("jira", "authentication", auth)
    yield _run("jira", "project", project)
    yield _run("jira", "labels", labels)
    yield _run("jira", "done", done)
    yield _run("jira", "search", search)


def check_zendesk(config: ZendeskConfig, tickets: ZendeskTickets) -> Iterator[Check]:
    api = tickets.api

    def auth() -> str:
        try:
            user = api.call("GET", "/api/v2/users/me.json")["user"]
        except Rejected as exc:
            raise Failed(f"{exc}; enable API token access in Admin Center and set "
                         "AGENTSAGA_ZENDESK_EMAIL and AGENTSAGA_ZENDESK_TOKEN(_FILE)") from exc
        if user.get("role") not in ("agent", "admin"):
            raise Failed(f"the token's user {user.get('email')} is an {user.get('role')}: only "
                         "agents and admins can create tickets through the API; use an agent")
        return f"signed in as {user.get('email')} ({user.get('role')})"

    def lookup() -> str:
        page = api.call("GET", "/api/v2/tickets.json", params={"external_id": PROBE_KEY})
        if not isinstance(page.get("tickets"), list):
            raise Failed("listing tickets by external_id answered without `tickets`")
        return "tickets can be listed by external_id"

    yield _run("zendesk", "authentication", auth)
    yield _run("zendesk", "lookup", lookup)


def check_email(config: EmailConfig, email: EmailConnector) -> Iterator[Check]:
    def lookup() -> str:
        try:
            email.api.call("GET", "/emails", params={"limit": 1})
        except Rejected as exc:
            raise Failed(f"{exc}; the lookup of sent emails (reconcile of send_email, R7) needs "
                         "an API key with full access, not a sending-only key") from exc
        return "sent emails can be listed"

    yield _run("email", "lookup", lookup)


def check_all(config: ConnectorConfig) -> list[Check]:
    """Every check of every configured system, in order."""
    results: list[Check] = []
    if config.stripe:
        require("stripe", "stripe", what="checking a Stripe account")
        from agentsaga.connectors.stripe import StripeConnector

        results += check_stripe(config.stripe, StripeConnector(config.stripe, config.http))
    if config.jira:
        results += check_jira(config.jira, JiraTickets(config.jira, config.http))
    if config.zendesk:
        results += check_zendesk(config.zendesk, ZendeskTickets(config.zendesk, config.http))
    if config.email:
        results += check_email(config.email, EmailConnector(config.email, config.http))
    return results
