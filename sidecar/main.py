"""`agentsaga sidecar`: serve the gRPC sidecar until SIGTERM/SIGINT."""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import signal
import threading
from typing import Any

from agentsaga.sidecar.server import Extensions, SidecarServicer, serve

from agentsaga import pivot, telemetry, unwind
from agentsaga.dispatch import Dispatcher, RunPolicy
from agentsaga.errors import ConfigurationError
from agentsaga.loading import load_tools
from agentsaga.log import SagaLog
from agentsaga.postgres import saga_log_dsn
from agentsaga.settings import Settings

log = logging.getLogger(__name__)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tools", help="comma-separated modules that register the tools: "
                        "dotted names (found in the current directory too) or files such as "
                        "./mytools.py (default: AGENTSAGA_TOOLS)")
    parser.add_argument("--listen", help="host:port or unix:/path (default: AGENTSAGA_LISTEN, "
                        "else 127.0.0.1:50051)")
    parser.add_argument("--dsn", help="Postgres DSN of the saga log (default: AGENTSAGA_DSN, "
                        "else an embedded Postgres under AGENTSAGA_DATA_DIR, by default "
                        "~/.local/share/agentsaga)")
    parser.add_argument("--allow-remote", action="store_true",
                        help="allow listening on a non-loopback address (the agent and the "
                        "sidecar normally share the pod's loopback)")


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
            "sidecar on localhost; pass --allow-remote to serve other hosts on purpose."
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
    return settings.with_(**changes) if changes else settings


def open_log(settings: Settings) -> SagaLog:
    return SagaLog(saga_log_dsn(settings), min_size=settings.pool_min, max_size=settings.pool_max,
                   async_outcomes=settings.outcome_commit == "async").open(
                       timeout=settings.db_wait_s)


def build_servicer(saga_log: SagaLog, settings: Settings) -> SidecarServicer:
    registry = load_tools(settings.tools)
    dispatcher = Dispatcher(saga_log, registry, settings)
    return SidecarServicer(dispatcher, extensions(dispatcher))


def extensions(dispatcher: Dispatcher) -> Extensions:
    """The RPCs implemented by the rest of the product (reconcile, unwind, pivot)."""
    saga_log, registry = dispatcher.log, dispatcher.registry

    def reach_pivot(run_id: str, plan: list[dict[str, Any]]) -> dict[str, Any]:
        with dispatcher.run_lock(run_id):
            return pivot.stage(saga_log, registry, run_id, dispatcher.epoch(run_id), plan)

    def await_decision(run_id: str, timeout: float) -> dict[str, Any]:
        return pivot.await_decision(saga_log, run_id, timeout)

    owner = dispatcher.settings.pod_name or "sidecar"
    pause = dispatcher.settings.recheck_pause_s

    def reconcile(run_id: str) -> tuple[dict[str, Any], bool]:
        with dispatcher.run_lock(run_id):
            return unwind.reconcile_run(saga_log, registry, run_id, owner,
                                        recheck_pause_s=pause).pair()

    def unwind_(run_id: str) -> tuple[dict[str, Any], bool]:
        with dispatcher.run_lock(run_id):
            return unwind.unwind_run(saga_log, registry, run_id, owner,
                                     recheck_pause_s=pause).pair()

    on_begin = None
    if dispatcher.settings.pod_name:  # in a pod: bind runs to AgentRuns (R12)
        from agentsaga.agentrun import begin_hook

        on_begin = begin_hook(dispatcher.settings, dispatcher.epoch,
                              lambda run_id, spec: dispatcher.set_policy(run_id, run_policy(spec)))
    return Extensions(reach_pivot=reach_pivot, await_decision=await_decision,
                      reconcile=reconcile, unwind=unwind_, on_begin=on_begin)


def run_policy(spec: dict[str, Any]) -> RunPolicy:
    """The pivot rules an AgentRun's spec sets for its run (R10)."""
    policy = spec.get("irreversibleBeforePivot", "refuse")
    return RunPolicy(irreversible_before_pivot="count" if policy == "count" else "refuse",
                     pivot_required=bool((spec.get("pivot") or {}).get("required", False)))


def run(args: argparse.Namespace) -> int:
    settings = build_settings(args)
    check_listen(settings.listen, args.allow_remote)
    telemetry.setup("agentsaga-sidecar")  # OTEL_* environment; off when none is set
    saga_log = open_log(settings)
    telemetry.observe_log(saga_log)
    servicer = build_servicer(saga_log, settings)
    serving = serve(servicer, settings.listen, workers=settings.workers)
    print(f"agentsaga sidecar listening on {serving.address} (pid {os.getpid()}, "
          f"{len(servicer.dispatcher.registry)} tools)", flush=True)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    serving.stop()
    saga_log.close()
    telemetry.shutdown()
    return 0
