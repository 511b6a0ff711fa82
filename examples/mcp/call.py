"""An agent's MCP client pointed at the sidecar instead of at the upstream: it lists the tools
the sidecar offers and calls one in a run (docs/mcp.md's quick start).

    python examples/mcp/call.py [MCP_URL] [RUN_ID]

Any MCP client does the same: the run is the header `Agentsaga-Run-Id`.
"""

from __future__ import annotations

import asyncio
import sys

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client


async def main(url: str, run_id: str) -> None:
    http = httpx2.AsyncClient(headers={"Agentsaga-Run-Id": run_id})
    async with Client(streamable_http_client(url, http_client=http)) as client:
        tools = (await client.list_tools()).tools
        print("offered:", ", ".join(tool.name for tool in tools))
        answer = await client.call_tool("create_ticket", {"summary": "Refund order 1182",
                                                          "order_id": "1182"})
        print("create_ticket:", answer.content[0].text if answer.content else answer)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8765/mcp",
                     sys.argv[2] if len(sys.argv) > 2 else "mcp-1"))
