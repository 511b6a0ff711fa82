"""`agentsaga sidecar`: serve the gRPC sidecar (and, when asked, the MCP endpoint) until
SIGTERM/SIGINT."""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import signal
import threading
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import TYPE_CHECKING

from agentsaga import telemetry
from agentsaga.connectors.mcp import TOOLS_MODULE
from agentsaga.errors import ConfigurationError
from agentsaga.loading import load_tools
from agentsaga.saga.registry import Registry
from agentsaga.service.saga_service import SagaService
from agentsaga.settings import Settings
from agentsaga.sidecar import access
from agentsaga.sidecar.server import SidecarServicer, bind, start
from agentsaga.store import SagaLog
from agentsaga.store.interfaces import SidecarStore
from agentsaga.store.postgres import embedded_migrated, saga_log_dsn

if TYPE_CHECKING:
    from agentsaga.sidecar.mcp_endpoint.serving import MCPServing


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tools", help="comma-separated modules that register the tools: "
                        "dotted names (found in the current directory too) or files such as "
                        "./mytools.py (default: AGENTSAGA_TOOLS)")
    parser.add_argument("--listen", help="host:port or unix:/path (default: AGENTSAGA_LISTEN, "
                        "else 127.0.0.1:50051)")
    parser.add_argument("--dsn", help="Postgres DSN of the saga log (default: AGENTSAGA_DSN, "
                        "else an embedded Postgres under AGENTSAGA_DATA_DIR, by default "
                        "~/.local/share/agentsaga)")
    parser.add_argument("--mcp-listen",
                        help="also serve MCP (Streamable HTTP at /mcp) on host:port, e.g. "
                        "127.0.0.1:8765 (default: AGENTSAGA_MCP_LISTEN, else off)")
    parser.add_argument("--mcp-upstreams",
                        help="a file of upstream MCP servers whose declared tools the sidecar "
                        "offers (default: AGENTSAGA_MCP_UPSTREAMS)")
    parser.add_argument("--allow-remote", action="store_true",
                        help="allow listening on a non-loopback address (the agent and the "
                        "sidecar normally share the pod's loopback; default: "
                        "AGENTSAGA_ALLOW_REMOTE, else off)")


def check_listen(listen: str, allow_remote: bool) -> None:
    """`host:port` or `unix:/path`; the sidecar serves its own pod: loopback or a unix socket
    unless explicitly allowed."""
    if listen.startswith("unix:"):
        if len(listen) == len("unix:"):
            raise ConfigurationError("--listen 'unix:' names no socket path: use unix:/path")
        return
    host, sep, port = listen.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ConfigurationError(
            f"--listen {listen!r} is not host:port (e.g. 127.0.0.1:50051, port 0 for any free "
            "port) or unix:/path")
    if allow_remote:
        return
    host = host.strip("[]")
    if host == "localhost":
        return
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise ConfigurationError(
            f"refusing to listen on {listen!r}: not a loopback address. The agent reaches the "
            "sidecar on localhost; pass --allow-remote (or set AGENTSAGA_ALLOW_REMOTE=true) to "
            "serve other hosts on purpose."
        )


def build_settings(args: argparse.Namespace) -> Settings:
    settings = Settings.from_env()
    changes: dict[str, object] = {}
    if getattr(args, "tools", None):
        changes["tools"] = tuple(t.strip() for t in args.tools.split(",") if t.strip())
    if getattr(args, "listen", None):
        changes["listen"] = args.listen
    if getattr(args, "dsn", None):
        changes["dsn"] = args.dsn
    mcp = settings.mcp
    if getattr(args, "mcp_listen", None):
        mcp = replace(mcp, listen=args.mcp_listen)
    if getattr(args, "mcp_upstreams", None):
        mcp = replace(mcp, upstreams=args.mcp_upstreams)
    if mcp != settings.mcp:
        changes["mcp"] = mcp
    return settings.with_(**changes) if changes else settings


def open_log(settings: Settings) -> AbstractContextManager[SidecarStore]:
    """The saga log as the sidecar's database role: no DDL, no decisions; leaving the context
    closes it. The schema is the migration's (`agentsaga migrate`, the chart's hook Job); a
    database without it is refused with that advice. Only the embedded Postgres of a
    developer's machine is migrated here, as its superuser, before the sidecar connects as its
    own role."""
    embedded_migrated(settings)
    saga_log = SagaLog(saga_log_dsn(settings), min_size=settings.pool_min,
                       max_size=settings.pool_max,
                       async_outcomes=settings.outcome_commit != "sync",
                       group_outcomes=settings.outcome_commit == "group",
                       hooks=telemetry.TelemetryHooks()).open(migrate=False,
                                                              timeout=settings.db_wait_s)
    try:
        saga_log.require_schema()
        require_own_namespace(saga_log.credential_namespace(), settings.pod_namespace)
    except BaseException:
        saga_log.close()
        raise
    return saga_log


def require_own_namespace(credential: str | None, pod_namespace: str) -> None:
    """Postgres lets a namespace's credential see only that namespace's runs: a sidecar given
    another's (or the shared `agentsaga_sidecar`, which is for runs outside Kubernetes) would
    have every run refused. Say so at start, and what to give it instead."""
    if credential is None or credential == pod_namespace:
        return
    held = f"namespace {credential!r}" if credential else "runs outside Kubernetes"
    serves = f"namespace {pod_namespace!r}" if pod_namespace else "runs outside Kubernetes"
    raise ConfigurationError(
        f"this sidecar serves {serves} but its database credential is for {held}: Postgres "
        "would refuse every run. Give it its namespace's own credential: with the chart, set "
        "postgres.credentials.location (one credential per agent namespace); otherwise run "
        f"`agentsaga migrate --namespace {pod_namespace or 'NAMESPACE'}` and connect as the "
        "role it creates.")


def build_service(saga_log: SidecarStore, settings: Settings,
                  registry: Registry | None = None) -> SagaService:
    """The saga service of this sidecar: its tools (the `--tools` modules and the declared
    tools of the upstream MCP servers) and telemetry around it. It holds no Kubernetes
    credentials: the operator learns of its runs from the log and binds their AgentRuns."""
    return SagaService(saga_log, registry or build_registry(settings), settings,
                       interceptors=[telemetry.TracingInterceptor()])


def build_registry(settings: Settings) -> Registry:
    """The `--tools` modules' tools, plus those of the upstreams file unless a tools module
    (`agentsaga.connectors.mcp_tools`, as the Jobs load them) registers them already."""
    upstreams = settings.mcp.upstreams
    registry = load_tools(settings.tools) if settings.tools or not upstreams else Registry()
    if upstreams and TOOLS_MODULE not in settings.tools:
        from agentsaga.connectors.mcp import declarations
        from agentsaga.connectors.mcp.registration import register_upstreams

        register_upstreams(registry, declarations.load(upstreams))
    return registry


def serve_mcp_endpoint(service: SagaService, token: str | None = None) -> MCPServing:
    """The MCP front end over the same service as gRPC: one validation, run lock, rate limit,
    set of epochs and error meaning, whichever front end a call comes through."""
    from agentsaga.sidecar.mcp_endpoint.handlers import Endpoint
    from agentsaga.sidecar.mcp_endpoint.serving import serve_mcp

    if logging.getLogger().level > logging.DEBUG:  # else a line per proxied request and session
        for noisy in ("httpx2", "mcp"):
            logging.getLogger(noisy).setLevel(logging.WARNING)
    endpoint = Endpoint(service, pod_run_id=service.settings.mcp.pod_run_id)
    mcp = service.settings.mcp
    return serve_mcp(endpoint.server(), mcp.listen, allowed_hosts=mcp.allowed_hosts,
                     token=token)


def run(args: argparse.Namespace) -> int:
    settings = build_settings(args)
    allow_remote = args.allow_remote or settings.allow_remote
    check_listen(settings.listen, allow_remote)
    if settings.mcp.listen:
        check_listen(settings.mcp.listen, allow_remote)
    # a non-loopback listener requires the pod's token: refused here without one
    grpc_token = access.required_token(settings, [settings.listen])
    mcp_token = access.required_token(settings, [settings.mcp.listen])
    telemetry.setup("agentsaga-sidecar")  # OTEL_* environment; off when none is set
    registry = build_registry(settings)  # a broken tools module is reported at once
    # the port before the database: a taken port is reported at once, not after the wait
    bound = bind(settings.listen, workers=settings.workers, hot_workers=settings.hot_workers,
                 token=grpc_token)
    try:
        opened = open_log(settings)
    except BaseException:
        bound.server.stop(None)
        bound.workers.shutdown(wait=False)
        raise
    with opened as saga_log:
        telemetry.observe_log(saga_log)
        service = build_service(saga_log, settings, registry)
        telemetry.zero_tool_counters(telemetry.current().instruments,
                                     ((s.name, s.cls) for s in service.registry))
        # MCP first: once gRPC health says SERVING, both front ends answer
        mcp = serve_mcp_endpoint(service, mcp_token) if settings.mcp.listen else None
        serving = start(bound, SidecarServicer(service))
        print(f"agentsaga sidecar listening on {serving.address} (pid {os.getpid()}, "
              f"{len(service.registry)} tools)", flush=True)
        if mcp is not None:
            print(f"agentsaga sidecar serving MCP at {mcp.url}", flush=True)
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        stop.wait()
        if mcp is not None:
            mcp.stop()
        serving.stop()
    telemetry.shutdown()
    return 0
