"""Zendesk Support: tickets created under an `Idempotency-Key` and carrying the step's key as
`external_id` (R4), found again through the consistent `GET /api/v2/tickets?external_id=`.

A staged ticket is created on `hold` with the tag `draft`; opening it sets `open`. Closing sets
`solved` with an internal note, and is a no-op success for a ticket already solved or closed.
Zendesk's API for agents cannot delete a staged ticket safely, so it is solved instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

from agentsaga.connectors.config import HttpSettings, ZendeskConfig
from agentsaga.connectors.json_api import JsonApi, with_backoff
from agentsaga.connectors.paths import segment
from agentsaga.errors import Rejected
from agentsaga.saga.registry import Effect, LookupContext

API = "/api/v2"


def _ticket(ticket: dict[str, Any]) -> Effect:
    ref = str(ticket["id"])
    return Effect(ref, {"id": ref, "summary": ticket.get("subject"),
                        "status": ticket.get("status"), "external_id": ticket.get("external_id")})


class ZendeskTickets:
    system = "zendesk"

    def __init__(self, config: ZendeskConfig, http: HttpSettings) -> None:
        auth = (f"{config.email}/token", config.token) if config.email else None
        self.api = JsonApi("zendesk", config.url, http, auth=auth)

    def create(self, summary: str, order_id: str, description: str, key: str, *,
               draft: bool) -> Effect:
        body = {"ticket": {
            "subject": summary, "external_id": key,
            "comment": {"body": description or f"Order {order_id}: {summary}", "public": False},
            "tags": ["saga", f"order_{order_id}"] + (["draft"] if draft else []),
            "status": "hold" if draft else "new",
        }}
        created = self.api.call("POST", f"{API}/tickets.json", json_body=body,
                                headers={"Idempotency-Key": key})
        return _ticket(created["ticket"])

    def find_many(self, keys: Sequence[str]) -> dict[str, Effect]:
        found: dict[str, Effect] = {}
        for key in dict.fromkeys(keys):
            page = with_backoff(
                partial(self.api.call, "GET", f"{API}/tickets.json",
                        params={"external_id": key}, search=True),
                self.api.settings, "zendesk lookup", sleep=self.api.sleep)
            tickets = [t for t in page.get("tickets", []) if t.get("external_id") == key]
            if tickets:
                found[key] = _ticket(tickets[0])
        return found

    def find_steps(self, steps: Sequence[LookupContext]) -> dict[str, Effect]:
        """By id where the log knows it (`GET tickets/{id}`, a read of the ticket itself),
        else by `external_id`."""
        found: dict[str, Effect] = {}
        for ctx in steps:
            ticket = self._marked(ctx.external_ref, ctx.key)
            if ticket is not None:
                found[ctx.key] = _ticket(ticket)
        rest = [c.key for c in steps if c.key not in found]
        return found | (self.find_many(rest) if rest else {})

    def _marked(self, ticket: str | None, key: str) -> dict[str, Any] | None:
        if not ticket:
            return None
        try:
            current: dict[str, Any] = self.api.call(
                "GET", f"{API}/tickets/{segment(ticket)}.json")["ticket"]
        except Rejected as exc:
            if exc.status == 404:
                return None
            raise
        return current if current.get("external_id") == key else None

    def _update(self, ticket: str, status: str, note: str, done: tuple[str, ...]) -> Effect:
        current = self.api.call("GET", f"{API}/tickets/{segment(ticket)}.json")["ticket"]
        if current["status"] in done:
            return _ticket(current)
        updated = self.api.call("PUT", f"{API}/tickets/{segment(ticket)}.json", json_body={
            "ticket": {"status": status, "comment": {"body": note, "public": False}}})
        return _ticket(updated["ticket"])

    def open(self, ticket: str, key: str) -> Effect:
        return self._update(ticket, "open", f"Moved to the team queue (saga step {key}).",
                            ("open", "pending", "solved", "closed"))

    def close(self, ticket: str, key: str, reason: str) -> Effect:
        return self._update(ticket, "solved", f"{reason} (saga step {key}).",
                            ("solved", "closed"))

    def delete(self, ticket: str, key: str) -> Effect:
        return self.close(ticket, key, "Staged ticket discarded")
