"""An MCP server over the world's systems, as another team would run one: tickets (Jira),
payments (Stripe), the warehouse. It knows nothing of sagas: it takes labels, metadata and
references as any such server does, and answers a failed call of the system behind it with a
tool error that says what the system answered. One tool, `bulk_email_customers`, is neither
read-only nor declared anywhere: the sidecar must not offer it.

    with WorldMCP(world.url) as upstream:  # upstream.url: http://127.0.0.1:PORT/mcp
        ...

`agentsaga world --mcp-port 8771` serves it beside the world (docs/mcp.md's quick start, whose
upstreams file is examples/mcp/upstreams.yaml).
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations

from agentsaga.connectors.tools import register_all
from agentsaga.errors import OutcomeUnknown, Rejected
from agentsaga.saga.registry import Effect, Registry, as_effect
from agentsaga.sidecar.mcp_endpoint.serving import PATH, MCPServing, serve_app
from agentsaga_lab.demo.world import connector_env

READ_ONLY = ToolAnnotations(read_only_hint=True)
LABEL = "saga-"


def _key(marker: str | None) -> str:
    """The caller's reference if it gave one (a label, a metadata value), else a fresh one."""
    return marker or uuid.uuid4().hex


def build(world_url: str) -> MCPServer:
    registry = register_all(Registry(), connector_env(world_url))
    server = MCPServer("world-systems", version="1")

    def call(tool: str, **kwargs: Any) -> dict[str, Any]:
        try:
            effect = as_effect(registry.get(tool).fn(**kwargs))
        except OutcomeUnknown as exc:
            raise ToolError(f"{tool}: the system did not answer in time (504 or timeout): "
                            f"{exc}") from exc
        except Rejected as exc:
            raise ToolError(f"{tool}: refused: {exc}") from exc
        return _result(effect)

    def find(tool: str, key: str) -> dict[str, Any] | None:
        effect = registry.get(tool).lookup
        assert effect is not None
        found = as_effect(effect(key))
        return None if found is None else _result(found)

    @server.tool(annotations=READ_ONLY)
    def search_orders(order_id: str) -> dict[str, Any]:
        """Look an order up at the warehouse."""
        return dict(registry.get("search_orders").fn(order_id=order_id))

    @server.tool()
    def create_ticket(summary: str, order_id: str, labels: list[str] | None = None,
                      description: str = "") -> dict[str, Any]:
        """Create a ticket in the support team's queue."""
        marker = next((x[len(LABEL):] for x in labels or [] if x.startswith(LABEL)), None)
        return call("create_ticket", summary=summary, order_id=order_id,
                    description=description, idempotency_key=_key(marker))

    @server.tool(annotations=READ_ONLY)
    def search_tickets(label: str) -> dict[str, Any]:
        """Tickets that carry a label."""
        found = find("create_ticket", label[len(LABEL):]) if label.startswith(LABEL) else None
        return {"tickets": [found] if found else []}

    @server.tool()
    def close_ticket(ticket: str, reason: str, request_id: str = "") -> dict[str, Any]:
        """Close a ticket with a reason (closing a closed ticket changes nothing)."""
        return call("close_ticket", ticket=ticket, reason=reason,
                    idempotency_key=_key(request_id))

    @server.tool()
    def charge_card(customer_id: str, amount: int, currency: str = "usd", reason: str = "",
                    order_id: str = "", metadata: dict[str, str] | None = None,
                    receipt: bool = False) -> dict[str, Any]:
        """Authorise a card payment (manual capture)."""
        return call("charge_card", customer_id=customer_id, amount=amount, currency=currency,
                    reason=reason, order_id=order_id, receipt=receipt,
                    idempotency_key=_key((metadata or {}).get("saga_key")))

    @server.tool(annotations=READ_ONLY)
    def search_payments(saga_key: str) -> dict[str, Any]:
        """Payments whose metadata carries this saga_key."""
        found = find("charge_card", saga_key)
        return {"payments": [found] if found else []}

    @server.tool()
    def cancel_or_refund_payment(payment: str, reason: str = "requested_by_customer",
                                 request_id: str = "") -> dict[str, Any]:
        """Release an authorisation, or refund a captured payment."""
        return call("cancel_or_refund_payment", payment=payment, reason=reason,
                    idempotency_key=_key(request_id))

    @server.tool()
    def reship(order_id: str, items: list[str], reason: str = "",
               reference: str = "") -> dict[str, Any]:
        """Ask the warehouse to ship an order again."""
        return call("reship", order_id=order_id, items=items, reason=reason,
                    idempotency_key=_key(reference))

    @server.tool(annotations=READ_ONLY)
    def search_reships(reference: str) -> dict[str, Any]:
        """Reships made under a reference."""
        found = find("reship", reference)
        return {"reships": [found] if found else []}

    @server.tool()
    def cancel_reship(reship: str, request_id: str = "") -> dict[str, Any]:
        """Cancel a reship that has not been picked yet."""
        return call("cancel_reship", reship=reship, idempotency_key=_key(request_id))

    @server.tool()
    def bulk_email_customers(subject: str, body: str) -> dict[str, Any]:
        """Email every customer at once."""
        raise ToolError("not in this world")

    return server


def _result(effect: Effect | None) -> dict[str, Any]:
    return {} if effect is None else {**effect.result, "id": effect.ref or effect.result.get("id")}


class WorldMCP:
    """The server on a free loopback port, in a thread."""

    def __init__(self, world_url: str) -> None:
        self.server = build(world_url)
        self.serving: MCPServing | None = None

    @property
    def url(self) -> str:
        assert self.serving is not None
        return self.serving.url

    def start(self, port: int = 0) -> WorldMCP:
        app = self.server.streamable_http_app(streamable_http_path=PATH, json_response=True)
        self.serving = serve_app(app, "127.0.0.1", port)
        return self

    def stop(self) -> None:
        if self.serving is not None:
            self.serving.stop()

    def __enter__(self) -> WorldMCP:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


DECLARATIONS = """\
# The saga declarations of the world's MCP server (`agentsaga_lab.demo.world_mcp`), as a team would
# write them for an MCP server it does not own. `{url}` is filled in with the server's address.
upstreams:
  world:
    url: "{url}"
    tools:
      create_ticket:
        class: compensatable
        audience: [support_team]
        key: {argument: labels, mode: append, value: "saga-{key}"}
        ref: id
        lookup:
          tool: search_tickets
          args: {label: "saga-{key}"}
          found: "tickets[0]"
          ref: "tickets[0].id"
        compensation:
          tool: close_ticket
          args:
            ticket: "{ref}"
            reason: "Rolled back: the agent run that created this was unwound ({{ args.summary }})"
        time: {call_timeout_s: 10, visible_within_s: 2, dedupes_for_s: 0}
      close_ticket:
        class: irreversible
        audience: [support_team]
        key: {argument: request_id}
        lookup: none
      charge_card:
        class: compensatable
        audience: [finance]
        key: {argument: metadata.saga_key}
        lookup:
          tool: search_payments
          args: {saga_key: "{key}"}
          found: "payments[0]"
        compensation:
          tool: cancel_or_refund_payment
          args: {payment: "{ref}"}
        time: {call_timeout_s: 10, visible_within_s: 60, dedupes_for_s: 86400}
      cancel_or_refund_payment:
        class: irreversible
        audience: [finance]
        key: {argument: request_id}
        lookup: none
      reship:
        class: compensatable
        audience: [warehouse]
        key: {argument: reference}
        lookup:
          tool: search_reships
          args: {reference: "{key}"}
          found: "reships[0]"
        compensation:
          tool: cancel_reship
          args: {reship: "{ref}"}
      cancel_reship:
        class: irreversible
        audience: [warehouse]
        key: {argument: request_id}
        lookup: none
"""


def write_upstreams(url: str, path: Path) -> Path:
    """The world server's declarations (an upstreams file), pointing at `url`."""
    path.write_text(DECLARATIONS.replace('"{url}"', f'"{url}"'))
    return path

