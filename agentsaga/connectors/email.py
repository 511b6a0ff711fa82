"""Email through a Resend-style HTTP API: drafts (reversible) and sends (irreversible).

A send carries the step's key natively (`Idempotency-Key`) and as findable headers (R4):
`X-Saga-Key` and a deterministic `Message-ID`; the lookup asks the provider's send log by
header, which lags like a search index (R7). A draft is invisible to its recipients; deleting it
undoes it completely, and deleting one already gone is a success. Drafts cannot be looked up by
key (the provider lists sent mail only), so an unknown draft create is settled by a human.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

from agentsaga.connectors.config import EmailConfig, HttpSettings
from agentsaga.connectors.json_api import JsonApi, with_backoff
from agentsaga.errors import Rejected
from agentsaga.registry import Effect

KEY_HEADER = "X-Saga-Key"


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
            self.api.call("DELETE", f"/drafts/{draft}")
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

    def find_many(self, keys: Sequence[str]) -> dict[str, Effect]:
        found: dict[str, Effect] = {}
        for key in dict.fromkeys(keys):
            page = with_backoff(
                partial(self.api.call, "GET", "/emails", params={"header": f"{KEY_HEADER}:{key}"},
                        search=True),
                self.api.settings, "email lookup")
            rows = page.get("data", [])
            if rows:
                found[key] = Effect(rows[0]["id"], {"id": rows[0]["id"], "to": rows[0].get("to"),
                                                    "subject": rows[0].get("subject"),
                                                    "message_id": message_id(key)})
        return found
