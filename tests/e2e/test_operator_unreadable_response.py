"""The operator outlives a response it cannot read: one list of AgentRuns gzipped without its
`Content-Encoding` (what a proxy that drops the header serves: `UnicodeDecodeError`, byte 0x8b),
or one watch event cut in the middle of its JSON with the response ended as if whole. A
proxy in the test, between `kubectl proxy` (with the operator's own credentials) and the
operator, serves that one bad response and relays everything else as it came. The operator
logs it, lists again, and handles an AgentRun created after it."""

from __future__ import annotations

import asyncio
import gzip
import json
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from aiohttp import ClientConnectionResetError, ClientSession, ClientTimeout, web

from sagatest.cluster.kube import KUBECTL
from sagatest.operator_fixtures import AR, Cluster, Obj

# the module's tests share one cluster: each makes and changes objects in `default` only
pytestmark = pytest.mark.one_cluster_per_module

HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host", "upgrade",
       "te", "trailer"}
LOGGED = "unreadable response from the API server while watching"


class FaultyProxy:
    """Relays every request to `upstream`, except the first one `fault` names: "gzip" (the
    first list of AgentRuns, gzipped, with no Content-Encoding) or "cut" (the first watch of
    AgentRuns: its first event line cut in half, then the response ended cleanly)."""

    def __init__(self, upstream: str, fault: str) -> None:
        self.upstream, self.fault = upstream, fault
        self.served = threading.Event()
        self.url = ""
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None
        self._session: ClientSession | None = None

    def __enter__(self) -> FaultyProxy:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=30)
        return self

    def __exit__(self, *_: object) -> None:
        async def stop() -> None:
            assert self._session is not None and self._runner is not None
            await self._session.close()
            await self._runner.shutdown()
            await self._runner.cleanup()
        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(timeout=30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    async def _start(self) -> None:
        self._session = ClientSession(timeout=ClientTimeout(total=None),
                                      auto_decompress=False)
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._relay)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"

    def _faulted(self, request: web.Request, kind: str) -> bool:
        watch = request.query.get("watch") in ("true", "1")
        mine = (request.method == "GET" and request.path.endswith("/agentruns")
                and self.fault == kind
                and watch == (kind == "cut") and not self.served.is_set())
        if mine:
            self.served.set()
        return mine

    async def _relay(self, request: web.Request) -> web.StreamResponse:
        assert self._session is not None
        gzip_list = self._faulted(request, "gzip")
        cut_event = not gzip_list and self._faulted(request, "cut")
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP}
        if gzip_list:  # the list in plain JSON, to gzip it here
            headers = {k: v for k, v in headers.items() if k.lower() != "accept-encoding"}
        body = await request.read()
        async with self._session.request(
                request.method, self.upstream + request.path_qs, data=body or None,
                headers=headers, allow_redirects=False,
                skip_auto_headers=("Content-Type",)) as reply:
            out_headers = {k: v for k, v in reply.headers.items() if k.lower() not in HOP}
            if gzip_list:
                return web.Response(status=reply.status, headers=out_headers,
                                    body=gzip.compress(await reply.read()))
            out = web.StreamResponse(status=reply.status, headers=out_headers)
            await out.prepare(request)
            try:
                if cut_event:
                    line = await reply.content.readline()
                    await out.write(line[:len(line) // 2])
                else:
                    async for chunk in reply.content.iter_any():
                        await out.write(chunk)
                await out.write_eof()
            except (ConnectionResetError, ClientConnectionResetError):
                pass  # the operator closed a watch
            return out


@contextmanager
def operator_proxy(cluster: Cluster) -> Iterator[str]:
    """`kubectl proxy` with the operator's own credentials (so the chart's RBAC still
    decides); yields its URL."""
    proc = subprocess.Popen(
        [str(KUBECTL), "--kubeconfig", str(cluster.operator_kubeconfig), "proxy", "--port=0"],
        stdout=subprocess.PIPE, text=True, env=cluster.kube.env(cluster.operator_kubeconfig))
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # "Starting to serve on 127.0.0.1:PORT"
        assert "Starting to serve on" in line, line
        yield "http://" + line.rsplit(" ", 1)[1].strip()
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()


def kubeconfig(path: Path, url: str) -> Path:
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "proxied",
        "clusters": [{"name": "proxied", "cluster": {"server": url}}],
        "users": [{"name": "proxied", "user": {}}],
        "contexts": [{"name": "proxied", "context": {"cluster": "proxied", "user": "proxied",
                                                      "namespace": "default"}}]}))
    return path


def create(cluster: Cluster, name: str) -> None:
    cluster.kube.create({"apiVersion": AR, "kind": "AgentRun",
                         "metadata": {"name": name, "namespace": "default"},
                         "spec": {"agent": "refunder"}})


def handled(run: Obj) -> bool:
    """kopf's first sight of an AgentRun done: its finalizer, then its creation handlers'
    last-handled configuration."""
    return bool(run["metadata"].get("finalizers")) and (
        "agentsaga.io/last-handled-configuration"
        in (run["metadata"].get("annotations") or {}))


@pytest.mark.parametrize("fault", ["gzip", "cut"])
def test_one_unreadable_response_is_logged_and_the_watch_lists_again(
        cluster: Cluster, fault: str) -> None:
    create(cluster, "before")
    with operator_proxy(cluster) as upstream, FaultyProxy(upstream, fault) as proxy:
        config = kubeconfig(cluster.workdir / "proxied-kubeconfig", proxy.url)
        operator = cluster.start_operator("--standalone", env={"KUBECONFIG": str(config)})
        create(cluster, "during")  # an event on the AgentRuns' watch (to cut, with "cut")
        assert proxy.served.wait(timeout=30), "the operator never made the faulted request"
        operator.wait_for_output(LOGGED, timeout=30)

        create(cluster, "after")
        for name in ("before", "during", "after"):
            cluster.wait_run(name, handled, timeout=30)
        assert operator.proc.poll() is None, operator.output()[-3000:]
    output = operator.output()
    error = "UnicodeDecodeError" if fault == "gzip" else "JSONDecodeError"
    assert f"({error}: " in output, output[-3000:]
    assert "Traceback" not in output, output[-3000:]
