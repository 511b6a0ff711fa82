"""The warehouse: reship requests, carrying the step's key as `Idempotency-Key` (R4).

A reship is an order to the warehouse; until it is picked it can be cancelled
(`POST /warehouse/reships/{id}/cancel`), so `reship` is compensatable, not irreversible: the
customer sees nothing until the parcel leaves. Lookups list the warehouse's reships (read-after-
write consistent) and match the key.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentsaga.connectors.config import HttpSettings, WarehouseConfig
from agentsaga.connectors.json_api import JsonApi
from agentsaga.connectors.paths import segment
from agentsaga.errors import Rejected
from agentsaga.saga.registry import Effect


def _reship(row: dict[str, Any]) -> Effect:
    return Effect(row["id"], {"id": row["id"], "order_id": row.get("order_id"),
                              "status": row.get("status"), "items": row.get("items", [])})


class WarehouseConnector:
    def __init__(self, config: WarehouseConfig, http: HttpSettings) -> None:
        self.api = JsonApi("warehouse", config.url, http)

    def order(self, order_id: str) -> dict[str, Any]:
        """What the warehouse knows about an order: its reships so far (pure)."""
        page = self.api.call("GET", "/warehouse/reships", params={"order_id": order_id})
        return {"order_id": order_id, "reships": page.get("reships", [])}

    def reship(self, order_id: str, items: Sequence[str], reason: str, key: str) -> Effect:
        body = {"order_id": order_id, "items": list(items), "reason": reason}
        created = self.api.call("POST", "/warehouse/reships", json_body=body,
                                headers={"Idempotency-Key": key})
        return _reship(created)

    def cancel(self, reship: str, key: str) -> Effect:
        try:
            done = self.api.call("POST", f"/warehouse/reships/{segment(reship)}/cancel",
                                 headers={"Idempotency-Key": key})
        except Rejected as exc:
            if exc.status == 404:  # gone or already cancelled
                return Effect(reship, {"id": reship, "status": "cancelled", "already": True})
            raise
        return _reship(done or {"id": reship, "status": "cancelled"})

    def find_many(self, keys: Sequence[str]) -> dict[str, Effect]:
        wanted = set(keys)
        page = self.api.call("GET", "/warehouse/reships")
        return {row["idempotency_key"]: _reship(row) for row in page.get("reships", [])
                if row.get("idempotency_key") in wanted}
