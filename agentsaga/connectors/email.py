"""Email through a Resend-style HTTP API: drafts (reversible) and sends (irreversible).

A send carries the step's key natively (`Idempotency-Key`) and as findable headers (R4):
`X-Saga-Key` and a deterministic `Message-ID`; the lookup pages through the provider's list of
sent emails (`GET /emails`, newest first) for that `message_id`, which lags like a search index
(R7); once the email's id is known (stored on the row, or observed by a late call), it reads
`GET /emails/{id}` instead, Resend's consistent lookup (external-apis.md §6). It reads at most
`LOOKUP_PAGES` pages; past them it cannot say "not sent" and fails, so
the step stays UNKNOWN for a human. A draft is invisible to its recipients; deleting it
undoes it completely, and deleting one already gone is a success. Drafts cannot be looked up by
key (the provider lists sent mail only), so an unknown draft create is settled by a human.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

from agentsaga.connectors.config import EmailConfig, HttpSettings
from agentsaga.connectors.json_api import JsonApi, with_backoff
from agentsaga.connectors.paths import invalid_id, segment
from agentsaga.errors import OutcomeUnknown, Rejected
from agentsaga.saga.registry import Effect, LookupContext

KEY_HEADER = "X-Saga-Key"
LOOKUP_PAGES = 10
"""Pages of 100 sent emails a lookup reads before it gives up (it then fails: UNKNOWN)."""


def message_id(key: str) -> str:
    return f"<saga.{key}@agentsaga.local>"


class EmailConnector:
    def __init__(self, config: EmailConfig, http: HttpSettings) -> None:
        self.config = config
        headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
        self.api = JsonApi("email", config.url, http, headers=headers)

    def _message(self, to: Sequence[str] | str, subject: str, body: str,
                 key: str) -> dict[str, Any]:
        recipients = [to] if isinstance(to, str) else list(to)
        return {"from": self.config.sender, "to": recipients, "subject": subject, "text": body,
                "headers": {KEY_HEADER: key, "Message-ID": message_id(key)}}

    def create_draft(self, to: Sequence[str] | str, subject: str, body: str,
                     key: str) -> Effect:
        created = self.api.call("POST", "/drafts", json_body=self._message(to, subject, body, key),
                                headers={"Idempotency-Key": key})
        return Effect(created["id"], {"id": created["id"], "object": "draft",
                                      "to": to, "subject": subject})

    def delete_draft(self, draft: str, key: str) -> Effect:
        try:
            self.api.call("DELETE", f"/drafts/{segment(draft)}")
        except Rejected as exc:
            if exc.status != 404:
                raise
            return Effect(draft, {"id": draft, "deleted": True, "already": True})
        return Effect(draft, {"id": draft, "deleted": True})

    def send(self, to: Sequence[str] | str, subject: str, body: str, key: str) -> Effect:
        sent = self.api.call("POST", "/emails", json_body=self._message(to, subject, body, key),
                             headers={"Idempotency-Key": key})
        return Effect(sent["id"], {"id": sent["id"], "to": to, "subject": subject,
                                   "message_id": message_id(key)})

    def find_steps(self, steps: Sequence[LookupContext]) -> dict[str, Effect]:
        """By id where the log knows it (consistent), by the send log for the rest (lags)."""
        found: dict[str, Effect] = {}
        for ctx in steps:
            sent = self._sent(ctx.external_ref, ctx.key)
            if sent is not None:
                found[ctx.key] = sent
        rest = [c.key for c in steps if c.key not in found]
        return found | (self.find_many(rest) if rest else {})

    def _sent(self, email_id: str | None, key: str) -> Effect | None:
        if not email_id or invalid_id(email_id):
            return None  # no email has such an id: nothing to read
        try:
            row = self.api.call("GET", f"/emails/{segment(email_id)}")
        except Rejected as exc:
            if exc.status == 404:
                return None
            raise
        if row.get("message_id") != message_id(key):
            return None
        return Effect(row["id"], {"id": row["id"], "to": row.get("to"),
                                  "subject": row.get("subject"), "message_id": row["message_id"]})

    def find_many(self, keys: Sequence[str]) -> dict[str, Effect]:
        wanted = {message_id(k): k for k in keys}
        found: dict[str, Effect] = {}
        after: str | None = None
        for _ in range(LOOKUP_PAGES):
            params: dict[str, Any] = {"limit": 100} | ({"after": after} if after else {})
            page = with_backoff(
                partial(self.api.call, "GET", "/emails", params=params, search=True),
                self.api.settings, "email lookup", sleep=self.api.sleep)
            rows = page.get("data", [])
            for row in rows:
                key = wanted.get(row.get("message_id", ""))
                if key is not None and key not in found:
                    found[key] = Effect(row["id"], {"id": row["id"], "to": row.get("to"),
                                                    "subject": row.get("subject"),
                                                    "message_id": row["message_id"]})
            if len(found) == len(wanted) or not page.get("has_more") or not rows:
                return found
            after = rows[-1]["id"]
        raise OutcomeUnknown(f"email lookup: {len(wanted) - len(found)} key(s) not among the "
                             f"newest {LOOKUP_PAGES * 100} sent emails; cannot tell whether "
                             "they were sent")
