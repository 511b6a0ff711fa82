"""`World`: every stand-in on one aiohttp server (plus SMTP), run on its own event loop in a
background thread, with fault injection and a ground-truth view.

    world = World(search_lag=0.5).start()
    world.url          # http://127.0.0.1:PORT  (/v1, /rest/api/3, /api/v2, /emails, /drafts,
                       #                          /warehouse, /_world)
    world.smtp_port
    world.faults.add(Fault("POST", "/rest/api/3/issue", "commit_then_504", on_call=1))
    world.truth()
    world.stop()

Control over HTTP (for other processes, e.g. `agentsaga world`):

    GET    /_world/truth              the ground truth (see `agentsaga_lab.world.truth`)
    GET    /_world/faults             active faults with their counters
    POST   /_world/faults             add a fault: JSON with the fields of `Fault` -> 201;
                                       a bad one -> 400 naming what is wrong, nothing added
    DELETE /_world/faults             remove all faults
    POST   /_world/reset              empty every stand-in, remove faults, default warehouse
    GET    /_world/config             {"search_lag", "search_rate", "reject_reships", and the
                                       accounts' knobs (see `agentsaga_lab.world.accounts`)}
    POST   /_world/config             change any of those fields
    GET    /_world/exchanges          every request and answer at the HTTP edge (`exchanges`)
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine
from types import TracebackType
from typing import Any, TypeVar

from aiohttp import web
from aiosmtpd.smtp import SMTP

from agentsaga_lab.world.accounts import Accounts
from agentsaga_lab.world.email import EmailStandIn, smtp_authenticator
from agentsaga_lab.world.exchanges import Exchange, ExchangeLog
from agentsaga_lab.world.faults import PRE_COMMIT_KINDS, Fault, FaultSet, after_commit
from agentsaga_lab.world.idempotency import FAULT, STOPPING, IdempotencyStore, Route, gate
from agentsaga_lab.world.index import WorldConfig
from agentsaga_lab.world.jira import JiraStandIn
from agentsaga_lab.world.stripe import StripeStandIn
from agentsaga_lab.world.truth import ground_truth
from agentsaga_lab.world.warehouse import Warehouse
from agentsaga_lab.world.zendesk import ZendeskStandIn

T = TypeVar("T")


class World:
    """The local world: Stripe, Jira, Zendesk, email (HTTP + SMTP) and a warehouse stand-in."""

    def __init__(
        self,
        *,
        search_lag: float = 0.0,
        search_rate: float = 20.0,
        host: str = "127.0.0.1",
        port: int = 0,
        smtp_port: int = 0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = WorldConfig(search_lag=search_lag, search_rate=search_rate, clock=clock)
        self.faults = FaultSet()
        self.idempotency = IdempotencyStore()
        self.stripe = StripeStandIn(self.config)
        self.jira = JiraStandIn(self.config)
        self.zendesk = ZendeskStandIn(self.config)
        self.email = EmailStandIn(self.config)
        self.warehouse = Warehouse()
        self.calls: Counter[str] = Counter()
        self.exchange_log = ExchangeLog()
        self._host, self._port, self._smtp_port = host, port, smtp_port
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._smtp: asyncio.Server | None = None
        self._stopping: asyncio.Event | None = None
        self.url = ""
        self.smtp_port = 0

    # --- lifecycle -------------------------------------------------------------------------------

    def start(self) -> World:
        """Serve in a background thread; returns once both ports are bound."""
        ready = threading.Event()
        failure: list[BaseException] = []

        def main() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                loop.run_until_complete(self._serve())
            except BaseException as exc:  # reported to start()'s caller
                failure.append(exc)
                ready.set()
                return
            ready.set()
            loop.run_forever()
            loop.close()

        self._thread = threading.Thread(target=main, name="agentsaga-world", daemon=True)
        self._thread.start()
        ready.wait()
        if failure:
            raise failure[0]
        return self

    def stop(self) -> None:
        """Stop serving: held and delayed responses end, connections close, the thread exits."""
        if self._loop is None or self._thread is None:
            return
        self._call(self._shutdown)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop = self._thread = None

    def __enter__(self) -> World:
        return self if self._loop else self.start()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    async def _serve(self) -> None:
        self._stopping = asyncio.Event()
        app = web.Application(middlewares=[self._middleware], client_max_size=10 * 2**20)
        app[STOPPING] = self._stopping
        routes: list[Route] = [
            *self.stripe.routes(), *self.jira.routes(), *self.zendesk.routes(),
            *self.email.routes(), *self.warehouse.routes(),
        ]
        for route in routes:
            app.router.add_route(
                route.method, route.path, gate(route.handler, self.idempotency, route.policy)
            )
        app.router.add_get("/_world/truth", self._http_truth)
        app.router.add_get("/_world/exchanges", self._http_exchanges)
        app.router.add_get("/_world/faults", self._http_faults)
        app.router.add_post("/_world/faults", self._http_add_fault)
        app.router.add_delete("/_world/faults", self._http_clear_faults)
        app.router.add_post("/_world/reset", self._http_reset)
        app.router.add_get("/_world/config", self._http_config)
        app.router.add_post("/_world/config", self._http_config)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self._host, self._port)  # timeout: the runner
        await site.start()
        server = getattr(site, "_server", None)
        port = server.sockets[0].getsockname()[1] if server else self._port
        self.url = f"http://{self._host}:{port}"
        handler = functools.partial(
            SMTP, self.email, hostname="world.local", authenticator=smtp_authenticator,
            auth_require_tls=False,
        )
        loop = asyncio.get_running_loop()
        self._smtp = await loop.create_server(handler, self._host, self._smtp_port)
        self.smtp_port = self._smtp.sockets[0].getsockname()[1]

    async def _shutdown(self) -> None:
        if self._stopping is not None:
            self._stopping.set()
        if self._smtp is not None:
            self._smtp.close()
            close_clients = getattr(self._smtp, "close_clients", None)  # Python 3.13+
            if close_clients is not None:
                close_clients()
        if self._runner is not None:
            await self._runner.cleanup()

    def _call(self, fn: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """Run a coroutine on the world's loop (state is only touched there) and wait for it."""
        if self._loop is None:
            raise RuntimeError("the world is not running; call start() first")
        return asyncio.run_coroutine_threadsafe(fn(), self._loop).result(timeout=30)

    # --- the Python API --------------------------------------------------------------------------

    def truth(self) -> dict[str, Any]:
        """The ground truth now (see `agentsaga_lab.world.truth` for the shape)."""
        async def snapshot() -> dict[str, Any]:
            return self._truth()
        return self._call(snapshot)

    def exchanges(self) -> list[Exchange]:
        """Every request the stand-ins received and their answers, oldest first."""
        async def snapshot() -> list[Exchange]:
            return self.exchange_log.list()
        return self._call(snapshot)

    def reset(self) -> None:
        """Forget every object, saved idempotency key, counter and fault; keep the config."""
        async def reset() -> None:
            self._reset()
        self._call(reset)

    def set_search_lag(self, seconds: float) -> None:
        """Seconds before writes show in Stripe search, Jira JQL, Zendesk search, email lookup."""
        self.config.search_lag = float(seconds)

    @property
    def accounts(self) -> Accounts:
        """What each stand-in's account allows; change a knob to break it on purpose."""
        return self.config.accounts

    def set_search_rate(self, per_second: float) -> None:
        """Stripe search requests allowed per second before 429."""
        self.config.search_rate = float(per_second)

    def _truth(self) -> dict[str, Any]:
        return ground_truth(stripe=self.stripe, jira=self.jira, zendesk=self.zendesk,
                            email=self.email, warehouse=self.warehouse, calls=self.calls)

    def _reset(self) -> None:
        for part in (self.stripe, self.jira, self.zendesk, self.email, self.warehouse):
            part.reset()
        self.idempotency.saved.clear()
        self.calls.clear()
        self.exchange_log.clear()
        self.faults.clear()

    # --- HTTP ----------------------------------------------------------------------------------

    @web.middleware
    async def _middleware(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        if request.path.startswith("/_world/"):
            return await handler(request)
        resource = request.match_info.route.resource
        pattern = resource.canonical if resource is not None else request.path
        self.calls[f"{request.method} {pattern}"] += 1
        body = await request.read()
        response: web.StreamResponse | None = None
        try:
            response = await self._faulted(request, handler)
            return response
        finally:
            self._record(request, body, response)

    async def _faulted(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        fault = self.faults.take(request.method, request.path)
        if fault is None:
            return await handler(request)
        if fault.kind in PRE_COMMIT_KINDS:
            request[FAULT] = fault
            return await handler(request)
        response = await handler(request)
        assert self._stopping is not None
        late = await after_commit(fault, request, self._stopping)
        return response if late is None else late

    def _record(self, request: web.Request, body: bytes,
                response: web.StreamResponse | None) -> None:
        answer = response.body if isinstance(response, web.Response) else b""
        self.exchange_log.add(Exchange(
            method=request.method, path=request.path, query=tuple(request.query.items()),
            headers=tuple(request.headers.items()), body=body,
            status=response.status if response is not None else 0,
            response_headers=tuple(response.headers.items()) if response is not None else (),
            response_body=answer if isinstance(answer, bytes) else b"",
            raw_path=request.raw_path.partition("?")[0],
        ))

    async def _http_truth(self, request: web.Request) -> web.Response:
        return web.json_response(self._truth())

    async def _http_exchanges(self, request: web.Request) -> web.Response:
        return web.json_response([e.to_dict() for e in self.exchange_log.list()])

    async def _http_faults(self, request: web.Request) -> web.Response:
        return web.json_response([f.to_dict() for f in self.faults.list()])

    async def _http_add_fault(self, request: web.Request) -> web.Response:
        """A fault checked whole before it is added: a bad one is a 400 saying what is wrong,
        and the active faults stay as they were."""
        try:
            raw = json.loads(await request.text())
        except ValueError as exc:
            return web.json_response({"error": f"the fault is not valid JSON: {exc}"},
                                     status=400)
        try:
            fault = Fault.from_dict(raw)
        except (ValueError, TypeError) as exc:
            return web.json_response({"error": str(exc)}, status=400)
        self.faults.add(fault)
        return web.json_response(fault.to_dict(), status=201)

    async def _http_clear_faults(self, request: web.Request) -> web.Response:
        self.faults.clear()
        return web.json_response({"faults": []})

    async def _http_reset(self, request: web.Request) -> web.Response:
        self._reset()
        return web.json_response({"reset": True})

    async def _http_config(self, request: web.Request) -> web.Response:
        if request.method == "POST":
            try:
                body = await request.json()
                unknown = (set(body) - {"search_lag", "search_rate", "reject_reships"}
                           - Accounts.knobs())
                if unknown:
                    raise ValueError(f"unknown config fields: {sorted(unknown)}")
                # read every field first: a bad one changes nothing
                lag = float(body.get("search_lag", self.config.search_lag))
                rate = float(body.get("search_rate", self.config.search_rate))
                accounts = dataclasses.replace(self.accounts)
                accounts.update(body)
            except (ValueError, TypeError, AttributeError) as exc:
                return web.json_response({"error": str(exc)}, status=400)
            self.set_search_lag(lag)
            self.set_search_rate(rate)
            if "reject_reships" in body:
                self.warehouse.reject_reships(bool(body["reject_reships"]))
            self.config.accounts = accounts
        return web.json_response({
            "search_lag": self.config.search_lag, "search_rate": self.config.search_rate,
            "reject_reships": self.warehouse.rejecting, **self.accounts.to_dict(),
        })
