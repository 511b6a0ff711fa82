"""`agentsaga world`: serve the local stand-in world until Ctrl-C, so that you can point your own
agent (through the sidecar) at Stripe, Jira, Zendesk, email and warehouse stand-ins with faults.
"""

from __future__ import annotations

import argparse
import signal
import threading
from types import FrameType

from agentsaga_lab.world.server import World


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8470, help="HTTP port (0: any free port)")
    parser.add_argument("--smtp-port", type=int, default=8025, help="SMTP port (0: any free)")
    parser.add_argument("--search-lag", type=float, default=2.0,
                        help="seconds before writes show in search endpoints (default 2)")
    parser.add_argument("--search-rate", type=float, default=20.0,
                        help="Stripe search requests per second before 429 (default 20)")
    parser.add_argument("--mcp-port", type=int, default=None,
                        help="also serve an MCP server over the world's systems (tickets, "
                        "payments, the warehouse: agentsaga_lab.demo.world_mcp) at "
                        "http://127.0.0.1:PORT/mcp, an upstream for the sidecar "
                        "(examples/mcp/upstreams.yaml declares its tools)")


def describe(world: World) -> str:
    """What `agentsaga world` prints once it serves."""
    url = world.url
    return "\n".join([
        f"agentsaga world serving on {url}",
        f"  Stripe      {url}/v1   (stripe.StripeClient('sk_test_x', "
        f"base_addresses={{'api': '{url}'}}))",
        f"  Jira        {url}/rest/api/3",
        f"  Zendesk     {url}/api/v2",
        f"  email API   {url}/emails, {url}/drafts",
        f"  warehouse   {url}/warehouse/reships",
        f"  SMTP        127.0.0.1:{world.smtp_port}" if world.smtp_port else "  SMTP        -",
        f"  truth       GET {url}/_world/truth",
        f"  faults      POST/GET/DELETE {url}/_world/faults   e.g. "
        '{"method":"POST","path":"/rest/api/3/issue","kind":"commit_then_504","on_call":1}',
        f"  config      POST {url}/_world/config   "
        '{"search_lag":2,"search_rate":20,"reject_reships":false}',
        f"  reset       POST {url}/_world/reset",
        "Ctrl-C to stop.",
    ])


def run(args: argparse.Namespace) -> int:
    # Ctrl-C and SIGTERM stop it, also when it was started with SIGINT ignored (a background
    # job of a shell without job control inherits that), and from the moment it says it serves
    for stop in (signal.SIGINT, signal.SIGTERM):
        signal.signal(stop, _interrupt)
    world = World(search_lag=args.search_lag, search_rate=args.search_rate, host=args.host,
                  port=args.port, smtp_port=args.smtp_port).start()
    upstream = None
    try:
        if args.mcp_port is not None:
            from agentsaga_lab.demo.world_mcp import WorldMCP

            upstream = WorldMCP(world.url).start(args.mcp_port)
        print(describe(world), flush=True)
        if upstream is not None:
            print(f"  MCP         {upstream.url}   (tickets, payments, the warehouse as MCP "
                  "tools: an upstream for the sidecar)", flush=True)
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        if upstream is not None:
            upstream.stop()
        world.stop()
    return 0


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt
