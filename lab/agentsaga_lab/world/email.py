"""Email stand-in: a Resend-like HTTP API (sends with `Idempotency-Key`, drafts, a send log
searchable by header) and an SMTP server (aiosmtpd) that records every message with its headers.

HTTP (JSON, any or no `Authorization`):

    POST   /emails              {from, to, subject, html|text, headers?, cc?, bcc?, tags?}
                                -> 200 {"id"}; honours Idempotency-Key (replay: same id; same key,
                                other payload: 409 invalid_idempotent_request)
    GET    /emails/{id}         -> the email
    GET    /emails?limit=&after=  -> {"object":"list","has_more","data":[...]}: Resend's list,
                                newest first, each with its `message_id`; it is read from the
                                send log, which lags like a search index (the world's search lag)
    POST   /drafts              -> 201 {"id"}; a draft sends nothing (reversible)
    GET    /drafts/{id}         -> the draft
    DELETE /drafts/{id}         -> 200 {"id","object":"draft","deleted":true}
    POST   /drafts/{id}/send    -> 200 {"id": <email id>}; the draft becomes a sent email

SMTP accepts any sender, recipients and (plain, without TLS) credentials.
"""

from __future__ import annotations

import email
import email.policy
import time
import uuid
from typing import Any

from aiohttp import web
from aiosmtpd.smtp import SMTP, AuthResult, Envelope, Session

from agentsaga_lab.world.idempotency import IdempotencyPolicy, Route, uncached
from agentsaga_lab.world.index import LaggedIndex, WorldConfig

Obj = dict[str, Any]


def _error(status: int, name: str, message: str) -> web.Response:
    return web.json_response({"statusCode": status, "name": name, "message": message},
                             status=status)


EMAIL_POLICY = IdempotencyPolicy(
    name="email",
    mismatch=lambda key: uncached(_error(409, "invalid_idempotent_request",
                                         "Same idempotency key used with a different request "
                                         "payload. Change your idempotency key or payload.")),
    in_flight=lambda key: uncached(_error(409, "concurrent_idempotent_requests",
                                          "Same idempotency key used while original request is "
                                          "still in progress. Try the request again later.")),
    invalid_key=lambda key: uncached(_error(400, "invalid_idempotency_key",
                                            "The key must be between 1-256 chars.")),
    max_key_length=256,
)


def _email_view(sent: Obj) -> Obj:
    """A sent email as Resend's `Email` object shows it (no nulls: absent instead)."""
    headers = {k.lower(): v for k, v in sent["headers"].items()}
    view = {**sent, "message_id": sent.get("message_id") or headers.get("message-id"),
            "last_event": "delivered"}
    return {k: v for k, v in view.items() if v is not None}


def _recipients(value: Any) -> list[str]:
    if value is None:
        return []
    return [value] if isinstance(value, str) else [str(v) for v in value]


class EmailStandIn:
    """The state and routes of the email API, and the SMTP handler (`handle_DATA`)."""

    def __init__(self, config: WorldConfig) -> None:
        self.config = config
        self.reset()

    def reset(self) -> None:
        self.emails: dict[str, Obj] = {}
        self.drafts: dict[str, Obj] = {}
        self.index = LaggedIndex(self.config)

    def routes(self) -> list[Route]:
        return [
            Route("POST", "/emails", self.send, EMAIL_POLICY),
            Route("GET", "/emails", self.lookup),
            Route("GET", "/emails/{id}", self.get),
            Route("POST", "/drafts", self.create_draft, EMAIL_POLICY),
            Route("GET", "/drafts/{id}", self.get_draft),
            Route("DELETE", "/drafts/{id}", self.delete_draft),
            Route("POST", "/drafts/{id}/send", self.send_draft),
        ]

    async def _message(self, request: web.Request) -> Obj | web.Response:
        try:
            body = await request.json()
        except ValueError:
            return uncached(_error(422, "validation_error", "The body is not valid JSON."))
        if not isinstance(body, dict):
            return uncached(_error(422, "validation_error", "The body must be a JSON object."))
        for name in ("from", "to", "subject"):
            if not body.get(name):
                return uncached(_error(422, "missing_required_field",
                                       f"The `{name}` field is missing."))
        if not (body.get("html") or body.get("text")):
            return uncached(_error(422, "validation_error", "Either `html` or `text` must be "
                                   "provided."))
        headers = body.get("headers") or {}
        if not isinstance(headers, dict):
            return uncached(_error(422, "validation_error", "`headers` must be an object."))
        return {
            "from": body["from"], "to": _recipients(body["to"]), "cc": _recipients(body.get("cc")),
            "bcc": _recipients(body.get("bcc")), "subject": body["subject"],
            "html": body.get("html"), "text": body.get("text"),
            "headers": {str(k): str(v) for k, v in headers.items()},
            "tags": body.get("tags") or [],
        }

    def _record(self, message: Obj, via: str, key: str | None) -> Obj:
        sent: Obj = {"id": str(uuid.uuid4()), "object": "email", "via": via,
                     "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                     "idempotency_key": key, **message}
        self.emails[sent["id"]] = sent
        self.index.put(sent["id"], sent)
        return sent

    async def send(self, request: web.Request) -> web.Response:
        message = await self._message(request)
        if isinstance(message, web.Response):
            return message
        sent = self._record(message, "api", request.headers.get("Idempotency-Key"))
        return web.json_response({"id": sent["id"]})

    async def get(self, request: web.Request) -> web.Response:
        refused = self._read_refused(request)
        if refused is not None:
            return refused
        sent = self.emails.get(request.match_info["id"])
        if sent is None:
            return _error(404, "not_found", "Email not found")
        return web.json_response(_email_view(sent))

    async def lookup(self, request: web.Request) -> web.Response:
        refused = self._read_refused(request)
        if refused is not None:
            return refused
        unknown = sorted(set(request.query) - {"limit", "after", "before"})
        if unknown:
            return _error(422, "validation_error", f"Unknown query parameter `{unknown[0]}`.")
        raw = request.query.get("limit", "20")
        if not raw.isdigit() or not 1 <= int(raw) <= 100:
            return _error(422, "validation_error", "`limit` must be between 1 and 100.")
        rows = list(reversed(self.index.visible()))
        after = request.query.get("after")
        if after:
            ids = [e["id"] for e in rows]
            rows = rows[ids.index(after) + 1:] if after in ids else []
        page = rows[:int(raw)]
        return web.json_response({"object": "list", "has_more": len(rows) > len(page),
                                  "data": [_email_view(e) for e in page]})

    def _read_refused(self, request: web.Request) -> web.Response | None:
        if self.config.accounts.email_full_access:
            return None
        return _error(401, "restricted_api_key",
                      "This API key is restricted to only send emails.")

    async def create_draft(self, request: web.Request) -> web.Response:
        message = await self._message(request)
        if isinstance(message, web.Response):
            return message
        draft: Obj = {"id": str(uuid.uuid4()), "object": "draft", "deleted": False,
                      "sent_email_id": None, **message}
        self.drafts[draft["id"]] = draft
        return web.json_response({"id": draft["id"], "object": "draft"}, status=201)

    def _draft(self, request: web.Request) -> Obj | web.Response:
        draft = self.drafts.get(request.match_info["id"])
        if draft is None or draft["deleted"]:
            return _error(404, "not_found", "Draft not found")
        return draft

    async def get_draft(self, request: web.Request) -> web.Response:
        draft = self._draft(request)
        return draft if isinstance(draft, web.Response) else web.json_response(draft)

    async def delete_draft(self, request: web.Request) -> web.Response:
        draft = self._draft(request)
        if isinstance(draft, web.Response):
            return draft
        if draft["sent_email_id"]:
            return _error(409, "draft_already_sent", "A sent draft cannot be deleted.")
        draft["deleted"] = True
        return web.json_response({"id": draft["id"], "object": "draft", "deleted": True})

    async def send_draft(self, request: web.Request) -> web.Response:
        draft = self._draft(request)
        if isinstance(draft, web.Response):
            return draft
        if draft["sent_email_id"]:
            return web.json_response({"id": draft["sent_email_id"]})
        fields = ("from", "to", "cc", "bcc", "subject", "html", "text", "headers", "tags")
        sent = self._record({k: draft[k] for k in fields}, "api",
                            request.headers.get("Idempotency-Key"))
        draft["sent_email_id"] = sent["id"]
        return web.json_response({"id": sent["id"]})

    # --- SMTP (aiosmtpd handler hooks) -----------------------------------------------------------

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        raw = envelope.original_content or envelope.content or b""
        data = raw if isinstance(raw, bytes) else raw.encode()
        parsed = email.message_from_bytes(data, policy=email.policy.default)
        body = parsed.get_body(preferencelist=("plain", "html"))
        text = body.get_content() if body is not None else ""
        headers = {k: str(v) for k, v in parsed.items()}
        message: Obj = {
            "from": envelope.mail_from, "to": list(envelope.rcpt_tos), "cc": [], "bcc": [],
            "subject": str(parsed.get("Subject", "")), "html": None, "text": text,
            "headers": headers, "tags": [], "message_id": headers.get("Message-ID"),
        }
        key = headers.get("Resend-Idempotency-Key") or headers.get("X-Saga-Idempotency-Key")
        self._record(message, "smtp", key)
        return "250 Message accepted for delivery"

    def truth(self) -> tuple[list[Obj], list[Obj]]:
        emails = [dict(e) for e in self.emails.values()]
        drafts = [{"id": d["id"], "to": d["to"], "subject": d["subject"],
                   "headers": dict(d["headers"]), "deleted": d["deleted"],
                   "sent_email_id": d["sent_email_id"]} for d in self.drafts.values()]
        return emails, drafts


def smtp_authenticator(
    server: SMTP, session: Session, envelope: Envelope, mechanism: str, auth_data: Any
) -> AuthResult:
    """Accept any credentials: the world checks behaviour, not passwords."""
    return AuthResult(success=True)
