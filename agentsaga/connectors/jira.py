"""Jira Cloud (REST v3): tickets that carry their step's key as the label `saga-<key>` (R4).

Jira has no idempotency header, so the label is the only way to find a ticket whose create
timed out; JQL search lags behind writes, hence the re-check in reconcile (R7). Once the issue's
id is known (stored on the row, or observed by a late call), the lookup reads it by id instead:
`GET issue/{id}` is consistent, where `search/jql` "doesn't provide read-after-write consistency"
(developer.atlassian.com/cloud/jira/platform/search-and-reconcile;
../shared/reference/external-apis.md §3), and compares its label with the step's key.

Closing picks the transition into the `done` status category (transition ids differ per
workflow) and is a no-op success for a ticket that is already done, so a compensation can run
again under its key.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

from agentsaga.connectors.config import HttpSettings, JiraConfig
from agentsaga.connectors.json_api import JsonApi, with_backoff
from agentsaga.connectors.paths import segment
from agentsaga.errors import Rejected
from agentsaga.saga.registry import Effect, LookupContext

API = "/rest/api/3"
LABELS_PER_QUERY = 50
DRAFT_LABEL = "draft"


def label(key: str) -> str:
    return f"saga-{key}"


def adf(text: str) -> dict[str, Any]:
    """Plain text as an Atlassian Document (v3 rich-text fields require it)."""
    paragraphs = [p for p in text.split("\n") if p] or [" "]
    return {"type": "doc", "version": 1, "content": [
        {"type": "paragraph", "content": [{"type": "text", "text": p}]} for p in paragraphs]}


def _ticket(issue: dict[str, Any]) -> Effect:
    fields = issue.get("fields") or {}
    status = (fields.get("status") or {}).get("name")
    return Effect(issue["key"], {"id": issue["key"], "issue_id": issue["id"],
                                 "summary": fields.get("summary"), "status": status,
                                 "labels": fields.get("labels", [])})


class JiraTickets:
    """create / open / close / delete a ticket, and find tickets by key."""

    system = "jira"

    def __init__(self, config: JiraConfig, http: HttpSettings) -> None:
        self.config = config
        auth = (config.email, config.token) if config.email or config.token else None
        self.api = JsonApi("jira", config.url, http, auth=auth,
                           headers={"Accept": "application/json"})

    def create(self, summary: str, order_id: str, description: str, key: str, *,
               draft: bool) -> Effect:
        labels = [label(key)] + ([DRAFT_LABEL] if draft else [])
        body = {"fields": {
            "project": {"key": self.config.project},
            "issuetype": {"name": self.config.issue_type},
            "summary": summary, "labels": labels,
            "description": adf(description or f"Order {order_id}: {summary}"),
        }}
        created = self.api.call("POST", f"{API}/issue", json_body=body)
        return Effect(created["key"], {"id": created["key"], "issue_id": created["id"],
                                       "summary": summary, "order_id": order_id,
                                       "status": "Draft" if draft else "Open"})

    def find_many(self, keys: Sequence[str]) -> dict[str, Effect]:
        found: dict[str, Effect] = {}
        wanted = list(dict.fromkeys(keys))
        for start in range(0, len(wanted), LABELS_PER_QUERY):
            chunk = wanted[start:start + LABELS_PER_QUERY]
            quoted = ", ".join(f'"{label(k)}"' for k in chunk)
            for issue in self._search(f"labels in ({quoted})"):
                labels = (issue.get("fields") or {}).get("labels", [])
                for k in chunk:
                    if label(k) in labels and k not in found:
                        found[k] = _ticket(issue)
        return found

    def find_steps(self, steps: Sequence[LookupContext]) -> dict[str, Effect]:
        """By id where the log knows it (consistent), by label search for the rest (lags)."""
        found: dict[str, Effect] = {}
        for ctx in steps:
            issue = self._labelled(ctx.external_ref, ctx.key)
            if issue is not None:
                found[ctx.key] = _ticket(issue)
        rest = [c.key for c in steps if c.key not in found]
        return found | (self.find_many(rest) if rest else {})

    def _labelled(self, ticket: str | None, key: str) -> dict[str, Any] | None:
        """Issue `ticket` if it exists and carries the step's label."""
        if not ticket:
            return None
        try:
            issue = self._get(ticket)
        except Rejected as exc:
            if exc.status == 404:
                return None
            raise
        return issue if label(key) in (issue.get("fields") or {}).get("labels", []) else None

    def _search(self, jql: str) -> list[dict[str, Any]]:
        issues: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            body: dict[str, Any] = {"jql": jql, "fields": ["summary", "status", "labels"],
                                    "maxResults": 100}
            if token:
                body["nextPageToken"] = token
            page = with_backoff(
                partial(self.api.call, "POST", f"{API}/search/jql", json_body=body, search=True),
                self.api.settings, "jira search", sleep=self.api.sleep)
            issues += page.get("issues", [])
            token = page.get("nextPageToken")
            if page.get("isLast", True) or not token:
                return issues

    def _get(self, ticket: str) -> dict[str, Any]:
        issue: dict[str, Any] = self.api.call("GET", f"{API}/issue/{segment(ticket)}",
                                              params={"fields": "summary,status,labels"})
        return issue

    def _move(self, ticket: str, *, category: str, comment: str) -> Effect:
        issue = self._get(ticket)
        status = issue["fields"]["status"]
        if status.get("statusCategory", {}).get("key") == category:
            return _ticket(issue)  # already there: repeating the step changes nothing
        listing = self.api.call("GET", f"{API}/issue/{segment(ticket)}/transitions")
        choice = next((t for t in listing.get("transitions", [])
                       if t.get("to", {}).get("statusCategory", {}).get("key") == category), None)
        if choice is None:
            raise Rejected(f"jira: no transition from {status.get('name')} into the "
                           f"{category!r} category for {ticket}")
        self.api.call("POST", f"{API}/issue/{segment(ticket)}/transitions", json_body={
            "transition": {"id": choice["id"]},
            "update": {"comment": [{"add": {"body": adf(comment)}}]},
        })
        return _ticket(self._get(ticket))

    def open(self, ticket: str, key: str) -> Effect:
        return self._move(ticket, category="indeterminate",
                          comment=f"Moved to the team queue (saga step {key}).")

    def close(self, ticket: str, key: str, reason: str) -> Effect:
        return self._move(ticket, category="done", comment=f"{reason} (saga step {key}).")

    def delete(self, ticket: str, key: str) -> Effect:
        try:
            self.api.call("DELETE", f"{API}/issue/{segment(ticket)}")
        except Rejected as exc:
            if exc.status != 404:
                raise
            return Effect(ticket, {"id": ticket, "deleted": True, "already": True})
        return Effect(ticket, {"id": ticket, "deleted": True})
