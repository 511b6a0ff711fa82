"""A counting reverse proxy in front of a Kubernetes API server: the operator under test talks
to it, and it counts every request the operator makes (watches included), so the benchmark
measures the operator's API load against any API server (`--kube-url`), not only a stand-in."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterable

from aiohttp import ClientConnectionResetError, ClientSession, ClientTimeout, web

_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host", "upgrade",
        "proxy-authenticate", "proxy-authorization", "te", "trailer"}
"""Headers of one connection (RFC 9110 7.6.1), and the framing the proxy sets again. Not
Content-Encoding: it belongs to the body, which the proxy relays as it came (the API server
gzips a large list for a client that accepts gzip, as kopf's does): without it the client reads
gzip as JSON."""


def _forwardable(headers: Iterable[tuple[str, str]]) -> dict[str, str]:
    return {k: v for k, v in headers if k.lower() not in _HOP}


class CountingProxy:
    """Runs on its own event-loop thread; `url` is where clients connect."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.stamps: list[tuple[float, str, str]] = []
        """(time.monotonic(), method, path?query) of every request, in arrival order."""
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name="bench-kube-proxy")
        self._runner: web.AppRunner | None = None
        self._session: ClientSession | None = None
        self._forwarding: set[asyncio.Task[object]] = set()
        self.url = ""

    def start(self) -> CountingProxy:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=30)
        return self

    async def _start(self) -> None:
        # the bodies relayed as the API server sent them, each with its Content-Encoding
        self._session = ClientSession(timeout=ClientTimeout(total=None, sock_connect=10),
                                      auto_decompress=False)
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._forward)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server  # the bound port of port 0
        assert server is not None and server.sockets  # type: ignore[attr-defined]
        port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]
        self.url = f"http://127.0.0.1:{port}"

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        task = asyncio.current_task()
        assert task is not None
        self._forwarding.add(task)
        try:
            return await self._relay(request)
        finally:
            self._forwarding.discard(task)

    async def _relay(self, request: web.Request) -> web.StreamResponse:
        self.stamps.append((time.monotonic(), request.method, request.path_qs))
        assert self._session is not None
        body = await request.read()
        async with self._session.request(
                request.method, self.upstream + request.path_qs, data=body or None,
                headers=_forwardable(request.headers.items()), allow_redirects=False,
                # a body without a Content-Type stays without one (the API server reads it as
                # JSON; aiohttp's own default, application/octet-stream, is refused with 415)
                skip_auto_headers=("Content-Type",)) as reply:
            out = web.StreamResponse(status=reply.status,
                                     headers=_forwardable(reply.headers.items()))
            await out.prepare(request)
            try:
                async for chunk in reply.content.iter_any():
                    await out.write(chunk)
                await out.write_eof()
            except (ConnectionResetError, ClientConnectionResetError):
                pass  # the client went away (a watch the operator closed, or its exit)
            return out

    def count(self, since: float, until: float | None = None) -> int:
        """Requests that arrived in [since, until)."""
        end = until if until is not None else float("inf")
        return sum(1 for t, _, _ in list(self.stamps) if since <= t < end)

    def quiet_since(self) -> float:
        """time.monotonic() of the newest request (0 when none)."""
        return self.stamps[-1][0] if self.stamps else 0.0

    def stop(self) -> None:
        async def _stop() -> None:
            # the requests in flight first: a watch an API server keeps open (until its own
            # timeout) would hold its handler, and the runner's cleanup waits for handlers
            for task in list(self._forwarding):
                task.cancel()
            await asyncio.gather(*self._forwarding, return_exceptions=True)
            if self._session is not None:
                await self._session.close()
            if self._runner is not None:
                await self._runner.cleanup()

        asyncio.run_coroutine_threadsafe(_stop(), self._loop).result(timeout=30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()
