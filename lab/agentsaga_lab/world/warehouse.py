"""Warehouse stand-in: reship requests that the warehouse accepts or rejects.

    POST /warehouse/reships      {order_id, items?, reason?} -> 201 {"id","order_id","status":
                                 "accepted"} or, while rejecting, 422 {"error":"reship_rejected",
                                 "message", "order_id"}. Every attempt is in the ground truth.
    GET  /warehouse/reships?order_id=...   -> {"reships":[...]} (read-after-write consistent)
    GET  /warehouse/reships/{id}
    POST /warehouse/reships/{id}/cancel   -> 200 {"status": "cancelled"} (again: the same answer;
                                 the reship stays in the ground truth with status cancelled)
"""

from __future__ import annotations

import uuid
from typing import Any

from aiohttp import web

from agentsaga_lab.world.idempotency import Route

Obj = dict[str, Any]


class Warehouse:
    """The state and routes of the warehouse stand-in."""

    def __init__(self) -> None:
        self.rejecting = False
        self.reset()

    def reset(self) -> None:
        self.rejecting = False
        self.reships: list[Obj] = []

    def reject_reships(self, reject: bool = True) -> None:
        """From now on, refuse (or accept again) every reship request."""
        self.rejecting = reject

    def routes(self) -> list[Route]:
        return [
            Route("POST", "/warehouse/reships", self.create),
            Route("GET", "/warehouse/reships", self.list_reships),
            Route("GET", "/warehouse/reships/{id}", self.get),
            Route("POST", "/warehouse/reships/{id}/cancel", self.cancel),
        ]

    async def create(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
        except ValueError:
            body = None
        if not isinstance(body, dict) or not body.get("order_id"):
            return web.json_response({"error": "invalid_request",
                                      "message": "order_id is required"}, status=400)
        reship: Obj = {"id": "rs_" + uuid.uuid4().hex[:16], "order_id": str(body["order_id"]),
                       "items": body.get("items") or [], "reason": body.get("reason"),
                       "idempotency_key": request.headers.get("Idempotency-Key"),
                       "status": "rejected" if self.rejecting else "accepted"}
        self.reships.append(reship)
        if self.rejecting:
            return web.json_response(
                {"error": "reship_rejected", "order_id": reship["order_id"],
                 "message": f"Order {reship['order_id']} is not eligible for a reship."},
                status=422)
        return web.json_response(reship, status=201)

    async def list_reships(self, request: web.Request) -> web.Response:
        rows = [r for r in self.reships if r["status"] != "rejected"]
        if "order_id" in request.query:
            rows = [r for r in rows if r["order_id"] == request.query["order_id"]]
        return web.json_response({"reships": rows})

    async def get(self, request: web.Request) -> web.Response:
        for reship in self.reships:
            if reship["id"] == request.match_info["id"] and reship["status"] != "rejected":
                return web.json_response(reship)
        return web.json_response({"error": "not_found", "message": "No such reship"}, status=404)

    async def cancel(self, request: web.Request) -> web.Response:
        for reship in self.reships:
            if reship["id"] == request.match_info["id"] and reship["status"] != "rejected":
                reship["status"] = "cancelled"
                return web.json_response(reship)
        return web.json_response({"error": "not_found", "message": "No such reship"}, status=404)

    def truth(self) -> list[Obj]:
        return [dict(r) for r in self.reships]
