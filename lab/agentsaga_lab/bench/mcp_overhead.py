"""The MCP path's overhead: a side-effecting upstream MCP tool called directly with
the official MCP client, against the same tool called through the sidecar's MCP endpoint (its
INTENDED row, the run-derived key in the arguments, the outcome row, the proxied call).
Both clients hold one open session and call from the same kind of thread, so the difference is
what the sidecar adds."""

from __future__ import annotations

import itertools
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcp.server import MCPServer

from agentsaga.connectors.mcp.declarations import UpstreamDeclaration
from agentsaga.connectors.mcp.upstream import EventLoopThread, Upstream
from agentsaga.sidecar.mcp_endpoint.serving import PATH, MCPServing, serve_app
from agentsaga_lab.bench.processes import free_port, start_sidecar
from agentsaga_lab.bench.stats import Sample, time_calls

UPSTREAMS = """\
upstreams:
  bench:
    url: "{url}"
    prefix: up_
    tools:
      noop:
        class: reversible
        key: {{argument: ref}}
        lookup: none
        compensation: {{tool: undo, args: {{ref: "{{key}}"}}}}
      undo:
        class: irreversible
        key: {{argument: ref}}
        lookup: none
"""
_runs = itertools.count()


def upstream_server() -> MCPServer:
    server = MCPServer("bench-upstream")

    @server.tool()
    def noop(n: int = 0, ref: str = "") -> dict[str, Any]:
        """A side-effecting tool whose body does nothing."""
        return {"id": ref or str(n)}

    @server.tool()
    def undo(ref: str = "") -> dict[str, Any]:
        """Its counter-action, which does nothing either."""
        return {"id": ref}

    return server


@dataclass
class Timed:
    direct: Sample
    through_sidecar: Sample


def _session(loop: EventLoopThread, url: str, headers: dict[str, str]) -> Upstream:
    """An open MCP client session (the sidecar's own upstream client, held on a loop thread)."""
    return Upstream("bench", UpstreamDeclaration(url=url, headers=headers), loop)


def _call(session: Upstream, tool: str, n: int) -> None:
    result = session.call(tool, {"n": n}, timeout=30)
    if result.is_error:
        raise RuntimeError(f"{tool}: {result.content}")


@contextmanager
def _upstream() -> Iterator[MCPServing]:
    app = upstream_server().streamable_http_app(streamable_http_path=PATH, json_response=True)
    serving = serve_app(app, "127.0.0.1", 0)
    try:
        yield serving
    finally:
        serving.stop()


def measure(dsn: str, calls: int) -> Timed:
    loop = EventLoopThread()
    with tempfile.TemporaryDirectory(prefix="agentsaga-bench-mcp-") as tmp, _upstream() as up:
        upstreams = Path(tmp) / "upstreams.yaml"
        upstreams.write_text(UPSTREAMS.format(url=up.url))
        mcp_port = free_port()
        sidecar = start_sidecar(dsn, extra_args=["--mcp-upstreams", str(upstreams),
                                                 "--mcp-listen", f"127.0.0.1:{mcp_port}"])
        try:
            direct = _session(loop, up.url, {})
            proxied = _session(loop, f"http://127.0.0.1:{mcp_port}{PATH}",
                               {"Agentsaga-Run-Id": f"bench-mcp-{next(_runs)}"})
            try:
                timed = Timed(time_calls(lambda i: _call(direct, "noop", i), calls),
                              time_calls(lambda i: _call(proxied, "up_noop", i), calls))
            finally:
                direct.close()
                proxied.close()
        finally:
            sidecar.stop()
            loop.stop()
    return timed
