"""A small upstream MCP server for the tests, over stdio (`python -m sagatest.mcp_upstream_server`)
or HTTP (`build()` served in-process). It remembers what it was asked, including the
Idempotency-Key header an HTTP call carried, and shows it through a read-only tool."""

from __future__ import annotations

import itertools
from typing import Any

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp_types import ToolAnnotations


def build() -> MCPServer:
    server = MCPServer("things")
    things: dict[str, dict[str, Any]] = {}
    deleted: list[dict[str, Any]] = []
    ids = itertools.count(1)

    @server.tool()
    def create_thing(name: str, ctx: Context, tag: str = "") -> dict[str, Any]:
        """Create a thing."""
        headers = ctx.headers or {}
        thing: dict[str, Any] = {"id": f"thing-{next(ids)}", "name": name, "tag": tag,
                 "key_header": headers.get("idempotency-key")}
        things[thing["id"]] = thing
        return thing

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def find_thing(tag: str) -> dict[str, Any]:
        """Things with a tag."""
        return {"things": [t for t in things.values() if t["tag"] == tag]}

    @server.tool()
    def delete_thing(id: str, name_was: str, request_id: str = "") -> dict[str, Any]:
        """Delete a thing."""
        deleted.append({"id": id, "name_was": name_was, "request_id": request_id})
        things.pop(id, None)
        return {"id": id, "deleted": True}

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def state() -> dict[str, Any]:
        """What this server holds and what it deleted."""
        return {"things": list(things.values()), "deleted": deleted}

    return server


UPSTREAMS = """\
upstreams:
  things:
    {transport}
    tools:
      create_thing:
        class: reversible
        key: {key}
        lookup: {{tool: find_thing, args: {{tag: "saga-{{key}}"}}, found: "things[0]"}}
        compensation:
          tool: delete_thing
          args: {{id: "{{ref}}", name_was: "{{result.name}} (was {{args.name}})"}}
      delete_thing:
        class: irreversible
        key: {{argument: request_id}}
        lookup: none
"""

if __name__ == "__main__":
    build().run("stdio")
