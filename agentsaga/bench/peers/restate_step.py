"""Restate peer: one invocation of a handler that runs N no-op `ctx.run` steps; each step timed
inside the handler (journaled by the Restate server before the handler goes on).

Run by the bench in its peers environment: `python restate_step.py DSN CALLS`; prints JSON.
The server (RESTATE_SERVER_BIN, from npm @restatedev/restate-server) and the service (restate-sdk
under hypercorn) listen on 127.0.0.1 on free ports; the server keeps its state in a temporary
folder; both are stopped before the script exits, whatever happens. DSN is unused."""

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from typing import Any

import restate
from _server import die_with_parent, free_port, stop_group  # a sibling module
from hypercorn.asyncio import serve
from hypercorn.config import Config
from restate.server_context import restate_context_is_replaying

START_TIMEOUT_S = 60.0

bench = restate.Service("Bench")


def noop() -> int:
    return 0


@bench.handler()
async def steps(ctx: restate.Context, count: int) -> list[float]:
    out: list[float] = []
    for i in range(count):
        start = time.perf_counter()
        await ctx.run_typed(f"noop-{i}", noop)
        if not restate_context_is_replaying.get():
            out.append((time.perf_counter() - start) * 1000.0)
    return out


def http(method: str, url: str, body: Any = None, timeout: float = 30.0) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method,
                                     headers={"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as reply:
        raw = reply.read()
    return json.loads(raw) if raw else None


def wait_http(url: str, deadline: float) -> None:
    while True:
        try:
            http("GET", url, timeout=2)
            return
        except (urllib.error.URLError, ConnectionError, OSError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


async def measure(calls: int, service_port: int, admin: str, ingress: str) -> list[float]:
    config = Config()
    config.bind = [f"127.0.0.1:{service_port}"]
    config.accesslog = None
    config.errorlog = None
    shutdown = asyncio.Event()
    app = restate.app(services=[bench])
    server = asyncio.create_task(serve(app, config, shutdown_trigger=shutdown.wait))  # type: ignore[arg-type]
    try:
        loop = asyncio.get_running_loop()
        deadline = time.monotonic() + START_TIMEOUT_S
        await loop.run_in_executor(None, wait_http, f"{admin}/health", deadline)
        await loop.run_in_executor(None, lambda: http(
            "POST", f"{admin}/deployments", {"uri": f"http://127.0.0.1:{service_port}"}))
        await loop.run_in_executor(None, lambda: http("POST", f"{ingress}/Bench/steps", 20))
        out: list[float] = await loop.run_in_executor(None, lambda: http(
            "POST", f"{ingress}/Bench/steps", calls, timeout=START_TIMEOUT_S + calls))
        return out
    finally:
        shutdown.set()
        await server


def main() -> None:
    calls = int(sys.argv[2])
    binary = os.environ.get("RESTATE_SERVER_BIN", "")
    if not binary or not os.path.exists(binary):
        raise SystemExit(f"restate-server not found (RESTATE_SERVER_BIN={binary!r})")
    base = tempfile.mkdtemp(prefix="agentsaga-bench-restate-")
    ingress_port, admin_port, node_port = free_port(), free_port(), free_port()
    env = {**os.environ,
           "RESTATE_INGRESS__BIND_ADDRESS": f"127.0.0.1:{ingress_port}",
           "RESTATE_ADMIN__BIND_ADDRESS": f"127.0.0.1:{admin_port}",
           "RESTATE_BIND_ADDRESS": f"127.0.0.1:{node_port}",
           "RESTATE_ADVERTISED_ADDRESS": f"http://127.0.0.1:{node_port}",
           "RESTATE_LOG_FILTER": "error"}
    server = subprocess.Popen(
        [binary, "--base-dir", base, "--no-logo", "--listen-mode", "tcp", "--bind-ip",
         "127.0.0.1", "--bind-port", str(node_port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True,
        preexec_fn=die_with_parent)
    try:
        out = asyncio.run(asyncio.wait_for(
            measure(calls, free_port(), f"http://127.0.0.1:{admin_port}",
                    f"http://127.0.0.1:{ingress_port}"), START_TIMEOUT_S + calls))
    finally:
        stop_group(server)
        shutil.rmtree(base, ignore_errors=True)
    print(json.dumps({"latencies_ms": out}))


if __name__ == "__main__":
    main()
