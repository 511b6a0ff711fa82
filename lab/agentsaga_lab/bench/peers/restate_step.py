"""Restate peer, in two modes (`python restate_step.py DSN CALLS MODE`; prints JSON):

    inhandler  one invocation of a handler that runs N no-op `ctx.run` steps; each step timed
               inside the handler (journaled by the Restate server before the handler goes on):
               the agent's code runs in the handler, like the in-process dispatcher
    remote     N ingress calls, one after the other, each to a handler doing one `ctx.run`;
               each call timed by the caller (another process, on a kept-alive connection):
               the agent is a client of Restate, like an agent of the sidecar

The server (RESTATE_SERVER_BIN, from npm @restatedev/restate-server) and the service (restate-sdk
under hypercorn) listen on 127.0.0.1 on free ports; the server keeps its state in a temporary
folder; both are stopped before the script exits, whatever happens. DSN is unused."""

import asyncio
import http.client
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


@bench.handler()
async def one(ctx: restate.Context, n: int) -> int:
    return await ctx.run_typed("noop", noop)


def remote_calls(ingress: str, calls: int) -> list[float]:
    """`calls` sequential ingress calls to Bench/one on one kept-alive HTTP/1.1 connection."""
    host, port = ingress.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    out: list[float] = []
    try:
        for i in range(-20, calls):  # 20 warm-up calls
            start = time.perf_counter()
            conn.request("POST", "/Bench/one", body=json.dumps(i),
                         headers={"content-type": "application/json"})
            reply = conn.getresponse()
            reply.read()
            if reply.status != 200:
                raise RuntimeError(f"Bench/one answered {reply.status}")
            if i >= 0:
                out.append((time.perf_counter() - start) * 1000.0)
    finally:
        conn.close()
    return out


def http_json(method: str, url: str, body: Any = None, timeout: float = 30.0) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method,
                                     headers={"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as reply:
        raw = reply.read()
    return json.loads(raw) if raw else None


def wait_http(url: str, deadline: float) -> None:
    while True:
        try:
            http_json("GET", url, timeout=2)
            return
        except (urllib.error.URLError, ConnectionError, OSError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


async def measure(calls: int, mode: str, service_port: int, admin: str,
                  ingress: str) -> list[float]:
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
        await loop.run_in_executor(None, lambda: http_json(
            "POST", f"{admin}/deployments", {"uri": f"http://127.0.0.1:{service_port}"}))
        if mode == "remote":
            return await loop.run_in_executor(None, remote_calls, ingress, calls)
        await loop.run_in_executor(None, lambda: http_json("POST", f"{ingress}/Bench/steps", 20))
        out: list[float] = await loop.run_in_executor(None, lambda: http_json(
            "POST", f"{ingress}/Bench/steps", calls, timeout=START_TIMEOUT_S + calls))
        return out
    finally:
        shutdown.set()
        await server


def main() -> None:
    calls = int(sys.argv[2])
    mode = sys.argv[3] if len(sys.argv) > 3 else "inhandler"
    if mode not in ("inhandler", "remote"):
        raise SystemExit(f"mode {mode!r}: inhandler or remote")
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
            measure(calls, mode, free_port(), f"http://127.0.0.1:{admin_port}",
                    f"http://127.0.0.1:{ingress_port}"), START_TIMEOUT_S + calls))
    finally:
        stop_group(server)
        shutil.rmtree(base, ignore_errors=True)
    print(json.dumps({"latencies_ms": out}))


if __name__ == "__main__":
    main()
