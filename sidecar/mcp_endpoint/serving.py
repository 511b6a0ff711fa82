"""Streamable HTTP at `/mcp` on the MCP listen address, served by uvicorn in a thread of the sidecar
process (the gRPC server keeps its own threads). `MCPServing.url` is what an agent points its
MCP client at."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import uvicorn
from mcp.server.lowlevel import Server

from agentsaga.errors import ConfigurationError
from agentsaga.sidecar import access

PATH = "/mcp"


@dataclass
class MCPServing:
    server: uvicorn.Server
    thread: threading.Thread
    host: str
    port: int

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}{PATH}"

    def stop(self, timeout: float = 5.0) -> None:
        self.server.should_exit = True
        self.thread.join(timeout)


def split_listen(listen: str) -> tuple[str, int]:
    host, _, port_text = listen.rpartition(":")
    host = host.strip("[]")
    if not host or not port_text.isdigit():
        raise ConfigurationError(f"--mcp-listen {listen!r}: use host:port, e.g. 127.0.0.1:8765")
    return host, int(port_text)


def serve_mcp(mcp_server: Server[Any], listen: str, *, allowed_hosts: Sequence[str] = (),
              token: str | None = None) -> MCPServing:
    """Serve `mcp_server` on `listen` (host:port, port 0 for any free port). Host and Origin
    are checked whatever the address (`access.transport_security`); with `token`, every request
    carries it (`access.BearerToken`)."""
    host, port = split_listen(listen)
    # stateless: every request names its run (header) and nothing is pushed to the client, so
    # no session state is kept between requests (and each call costs less)
    app: Any = mcp_server.streamable_http_app(
        streamable_http_path=PATH, json_response=True, stateless_http=True, host=host,
        transport_security=access.transport_security(host, allowed_hosts))
    if token is not None:
        app = access.BearerToken(app, token, listen)
    return serve_app(app, host, port)


def serve_app(app: Any, host: str, port: int, *, start_timeout: float = 10.0) -> MCPServing:
    """Any ASGI app (an MCP server's Streamable HTTP app) on host:port, in a thread."""
    listen = f"{host}:{port}"
    config = uvicorn.Config(app, host=host, port=port, log_level="warning",
                            lifespan="on", access_log=False)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="agentsaga-mcp", daemon=True)
    thread.start()
    deadline = time.monotonic() + start_timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            raise ConfigurationError(f"cannot serve MCP on {listen!r} (address in use?)")
        time.sleep(0.01)
    bound = server.servers[0].sockets[0].getsockname()
    return MCPServing(server, thread, host, int(bound[1]))
