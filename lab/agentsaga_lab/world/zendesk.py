"""Zendesk Support stand-in: tickets with `external_id`, `Idempotency-Key` on create, updates with
internal notes, the consistent `?external_id=` list and the lagging Search API.

Paths work with and without `.json` (`/api/v2/tickets` and `/api/v2/tickets.json`). Any (or no)
auth is accepted, unless the account's knobs say otherwise (`agentsaga_lab.world.accounts`): without
API token access every request is a 401, and an end user (not an agent) gets 403 from the ticket
endpoints; `GET /api/v2/users/me` says who the token belongs to.
A ticket's status is `new` until it is updated; solving auto-assigns agent 1;
`closed` tickets refuse updates other than tags, subject and priority (422).
"""

from __future__ import annotations

import json
import shlex
import time
from typing import Any

from aiohttp import web

from agentsaga_lab.world.idempotency import Handler, IdempotencyPolicy, Route, uncached
from agentsaga_lab.world.index import LaggedIndex, WorldConfig

Obj = dict[str, Any]
STATUSES = ("new", "open", "pending", "hold", "solved", "closed")


def _error(
    status: int, error: str, description: str, details: dict[str, str] | None = None
) -> web.Response:
    body: Obj = {"error": error, "description": description}
    if details:
        body["details"] = {k: [{"description": v, "error": "InvalidValue"}]
                           for k, v in details.items()}
    return web.json_response(body, status=status)


ZENDESK_POLICY = IdempotencyPolicy(
    name="zendesk",
    mismatch=lambda key: uncached(_error(400, "IdempotentRequestError",
                                         "Request parameters don't match the given idempotency "
                                         "key")),
    in_flight=lambda key: uncached(_error(409, "IdempotentRequestError",
                                          "Another request with this idempotency key is still "
                                          "in progress")),
    invalid_key=lambda key: uncached(_error(400, "InvalidIdempotencyKey",
                                            "Idempotency key is longer than 255 characters")),
    headers=lambda key, replayed: {"x-idempotency-lookup": "hit" if replayed else "miss"},
)


class ZendeskStandIn:
    """The state and routes of the Zendesk stand-in."""

    def __init__(self, config: WorldConfig) -> None:
        self.config = config
        self.reset()

    def reset(self) -> None:
        self.tickets: dict[int, Obj] = {}
        self.comments: dict[int, list[Obj]] = {}
        self.next_id = 1
        self.index = LaggedIndex(self.config)

    def routes(self) -> list[Route]:
        out = []
        for ext in ("", ".json"):
            out += [
                Route("POST", f"/api/v2/tickets{ext}", self._agent(self.create), ZENDESK_POLICY),
                Route("GET", f"/api/v2/tickets{ext}", self._agent(self.list_tickets)),
                Route("GET", "/api/v2/tickets/{id:\\d+}" + ext, self._agent(self.get)),
                Route("PUT", "/api/v2/tickets/{id:\\d+}" + ext, self._agent(self.update)),
                Route("GET", "/api/v2/tickets/{id:\\d+}/comments" + ext,
                      self._agent(self.list_comments)),
                Route("GET", f"/api/v2/search{ext}", self._agent(self.search)),
                Route("GET", f"/api/v2/users/me{ext}", self._signed_in(self.me)),
            ]
        return out

    def _signed_in(self, handler: Handler) -> Handler:
        """Without API token access (Admin Center), every request is a 401."""
        async def run(request: web.Request) -> web.StreamResponse:
            if not self.config.accounts.zendesk_token_access:
                return uncached(web.json_response({"error": "Couldn't authenticate you"},
                                                  status=401))
            return await handler(request)
        return run

    def _agent(self, handler: Handler) -> Handler:
        """Ticket endpoints of the agent API refuse an end user (403)."""
        async def run(request: web.Request) -> web.StreamResponse:
            if not self.config.accounts.zendesk_agent:
                return uncached(_error(403, "Forbidden", "You do not have access to this page. "
                                       "Please contact the account owner of this help desk for "
                                       "further help."))
            return await handler(request)
        return self._signed_in(run)

    async def me(self, request: web.Request) -> web.Response:
        agent = self.config.accounts.zendesk_agent
        return web.json_response({"user": {
            "id": 1 if agent else 100, "name": "agentsaga", "email": "agent@shop.example",
            "role": "agent" if agent else "end-user", "active": True, "verified": True,
            "url": f"{request.url.origin()}/api/v2/users/{1 if agent else 100}.json",
        }})

    def _view(self, ticket: Obj, request: web.Request) -> Obj:
        view = {k: v for k, v in ticket.items() if k != "idempotency_key"}
        return {**view, "url": f"{request.url.origin()}/api/v2/tickets/{ticket['id']}.json"}

    def _save(self, ticket: Obj) -> None:
        ticket["updated_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        self.tickets[ticket["id"]] = ticket
        self.index.put(str(ticket["id"]), ticket)

    def _add_comment(self, ticket_id: int, comment: Obj) -> None:
        self.comments.setdefault(ticket_id, []).append({
            "id": sum(len(c) for c in self.comments.values()) + 1, "type": "Comment",
            "body": str(comment.get("body") or comment.get("html_body") or ""),
            "public": bool(comment.get("public", True)), "author_id": 1,
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        })

    async def _ticket_body(self, request: web.Request) -> Obj | web.Response:
        try:
            body = await request.json()
        except ValueError:
            return uncached(_error(400, "InvalidEndpoint", "The request body is not valid JSON"))
        if not isinstance(body, dict) or not isinstance(body.get("ticket"), dict):
            return uncached(_error(400, "InvalidEndpoint", "Expected a `ticket` object"))
        ticket: Obj = body["ticket"]
        return ticket

    async def create(self, request: web.Request) -> web.Response:
        fields = await self._ticket_body(request)
        if isinstance(fields, web.Response):
            return fields
        comment = fields.get("comment") or {}
        if not (comment.get("body") or comment.get("html_body") or fields.get("description")):
            return uncached(_error(422, "RecordInvalid", "Record validation errors",
                                   {"description": "Description: cannot be blank"}))
        status = fields.get("status") or "new"
        if status not in STATUSES:
            return uncached(_error(422, "RecordInvalid", "Record validation errors",
                                   {"status": f"Status: {status} is not valid"}))
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        ticket: Obj = {
            "id": self.next_id, "external_id": fields.get("external_id"),
            "subject": fields.get("subject"), "raw_subject": fields.get("subject"),
            "description": comment.get("body") or fields.get("description"),
            "status": status, "priority": fields.get("priority"),
            "tags": list(fields.get("tags") or []), "requester_id": 100,
            "assignee_id": fields.get("assignee_id"), "created_at": now, "updated_at": now,
            "idempotency_key": request.headers.get("Idempotency-Key"),
        }
        self.next_id += 1
        self._add_comment(ticket["id"], comment or {"body": ticket["description"]})
        self._save(ticket)
        return web.json_response({"ticket": self._view(ticket, request)}, status=201)

    def _find(self, request: web.Request) -> Obj | None:
        return self.tickets.get(int(request.match_info["id"]))

    async def get(self, request: web.Request) -> web.Response:
        ticket = self._find(request)
        if ticket is None:
            return _error(404, "RecordNotFound", "Not found")
        return web.json_response({"ticket": self._view(ticket, request)})

    async def update(self, request: web.Request) -> web.Response:
        ticket = self._find(request)
        if ticket is None:
            return _error(404, "RecordNotFound", "Not found")
        fields = await self._ticket_body(request)
        if isinstance(fields, web.Response):
            return fields
        if ticket["status"] == "closed" and set(fields) - {"tags", "subject", "priority"}:
            return _error(422, "RecordInvalid", "Record validation errors",
                          {"status": "Status: closed prevents ticket update"})
        status = fields.get("status", ticket["status"])
        if status not in STATUSES:
            return _error(422, "RecordInvalid", "Record validation errors",
                          {"status": f"Status: {status} is not valid"})
        for name in ("subject", "priority", "external_id", "assignee_id", "tags"):
            if name in fields:
                ticket[name] = fields[name]
        if status in ("solved", "closed") and not ticket["assignee_id"]:
            ticket["assignee_id"] = 1
        ticket["status"] = status
        if fields.get("comment"):
            self._add_comment(ticket["id"], fields["comment"])
        self._save(ticket)
        return web.json_response({"ticket": self._view(ticket, request)})

    async def list_comments(self, request: web.Request) -> web.Response:
        ticket = self._find(request)
        if ticket is None:
            return _error(404, "RecordNotFound", "Not found")
        comments = self.comments.get(ticket["id"], [])
        return web.json_response({"comments": comments, "count": len(comments),
                                  "next_page": None, "previous_page": None})

    async def list_tickets(self, request: web.Request) -> web.Response:
        rows = list(self.tickets.values())
        if "external_id" in request.query:
            rows = [t for t in rows if t["external_id"] == request.query["external_id"]]
        return web.json_response({"tickets": [self._view(t, request) for t in rows],
                                  "count": len(rows), "next_page": None, "previous_page": None})

    async def search(self, request: web.Request) -> web.Response:
        try:
            terms = shlex.split(request.query.get("query", ""))
        except ValueError:
            return _error(400, "InvalidQuery", "The query could not be parsed")
        rows = self.index.visible()
        for term in terms:
            name, _, value = term.partition(":")
            if not value:
                rows = [t for t in rows if term.lower() in json.dumps(t).lower()]
            elif name == "type":
                rows = rows if value == "ticket" else []
            elif name in ("tags", "tag"):
                rows = [t for t in rows if value in t["tags"]]
            elif name in ("external_id", "status", "subject"):
                rows = [t for t in rows if str(t.get(name)) == value]
            else:
                return _error(400, "InvalidQuery", f"Unsupported search term '{name}'")
        results = [{**self._view(t, request), "result_type": "ticket"} for t in rows]
        return web.json_response({"results": results, "count": len(results),
                                  "next_page": None, "previous_page": None, "facets": None})

    def truth(self) -> list[Obj]:
        return [
            {"system": "zendesk", "id": t["id"], "external_id": t["external_id"],
             "status": t["status"],
             "state": "closed" if t["status"] in ("solved", "closed") else "open",
             "tags": list(t["tags"]), "subject": t["subject"],
             "idempotency_key": t["idempotency_key"],
             "comments": [{"body": c["body"], "public": c["public"]}
                          for c in self.comments.get(t["id"], [])]}
            for t in self.tickets.values()
        ]
