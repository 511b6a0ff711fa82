"""One long-lived MCP client session per upstream, usable from any thread.

Tools run in the Dispatcher's threads, which are not asyncio; the sessions live on one event
loop in a daemon thread, and each call waits for its result with the tool's call timeout.
A session that broke (the upstream restarted) is opened again on the next call. A call whose
key goes in an HTTP header opens a connection of its own that carries that header.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar, cast

import httpx2
import mcp_types as types
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from agentsaga.connectors.mcp.declarations import UpstreamDeclaration
from agentsaga.errors import ConfigurationError, OutcomeUnknown, Rejected

log = logging.getLogger(__name__)
T = TypeVar("T")


def _meta(meta: dict[str, Any] | None) -> types.RequestParamsMeta | None:
    return None if meta is None else cast(types.RequestParamsMeta, meta)


class EventLoopThread:
    """An asyncio loop in a daemon thread; `run(coro, timeout)` from any other thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="agentsaga-upstreams",
                                       daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float) -> T:
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout)
        except TimeoutError:
            future.cancel()
            raise

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


_loop: EventLoopThread | None = None
_loop_guard = threading.Lock()


def shared_loop() -> EventLoopThread:
    global _loop
    with _loop_guard:
        if _loop is None:
            _loop = EventLoopThread()
        return _loop


class Upstream:
    """An upstream MCP server: list its tools, call them."""

    def __init__(self, name: str, decl: UpstreamDeclaration,
                 loop: EventLoopThread | None = None) -> None:
        self.name = name
        self.decl = decl
        self.loop = loop or shared_loop()
        self._client: Client | None = None
        self._closed: asyncio.Event | None = None
        self._task: asyncio.Future[None] | None = None
        self._lock = threading.Lock()

    @property
    def where(self) -> str:
        return self.decl.url or " ".join(self.decl.command or [])

    def _target(self, headers: dict[str, str] | None = None) -> Any:
        if self.decl.url is not None:
            http = httpx2.AsyncClient(headers={**self.decl.headers, **(headers or {})},
                                      timeout=httpx2.Timeout(30.0, read=300.0))
            return streamable_http_client(self.decl.url, http_client=http)
        assert self.decl.command is not None
        return StdioServerParameters(command=self.decl.command[0], args=self.decl.command[1:],
                                     env=self.decl.env)

    async def _hold(self, ready: asyncio.Future[Client], closed: asyncio.Event) -> None:
        """The session, held open until `closed`. Its failure goes to whoever waits for it to
        open (`ready`); once open, a broken session is seen by the calls on it, and the next
        `client()` opens another (this task is done)."""
        try:
            async with Client(self._target()) as client:
                ready.set_result(client)
                await closed.wait()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if not ready.done():
                ready.set_exception(exc)
            else:
                log.info("the session with MCP upstream %r ended: %s", self.name,
                         _innermost(exc))

    async def _open(self) -> Client:
        ready: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
        self._closed = asyncio.Event()
        self._task = asyncio.ensure_future(self._hold(ready, self._closed))
        return await ready

    def client(self) -> Client:
        """The session, opened (again) if it is not open."""
        with self._lock:
            if self._client is not None and self._task is not None and not self._task.done():
                return self._client
            try:
                self._client = self.loop.run(self._open(), self.decl.connect_timeout_s)
            except Exception as exc:
                cause = _innermost(exc)
                raise ConfigurationError(
                    f"cannot connect to the MCP upstream {self.name!r} at {self.where}: "
                    f"{type(cause).__name__}: {cause}") from exc
            return self._client

    def list_tools(self) -> list[types.Tool]:
        client = self.client()
        tools: list[types.Tool] = []
        cursor: str | None = None
        while True:
            page = self.loop.run(client.list_tools(cursor=cursor), self.decl.connect_timeout_s)
            tools += page.tools
            cursor = page.next_cursor
            if not cursor:
                return tools

    def call(self, tool: str, args: dict[str, Any], *, timeout: float,
             meta: dict[str, Any] | None = None,
             headers: dict[str, str] | None = None) -> types.CallToolResult:
        """The tool's result (isError included). A transport failure, a timeout or a broken
        session after the request may have gone out is OutcomeUnknown (R5); no session at all
        (the upstream cannot be reached) is Rejected: nothing went out."""
        try:
            if headers:
                return self.loop.run(self._call_with_headers(tool, args, meta, headers, timeout),
                                     timeout + self.decl.connect_timeout_s)
            client = self.client()
            return self.loop.run(client.call_tool(tool, args, read_timeout_seconds=timeout,
                                                  meta=_meta(meta)), timeout + 1.0)
        except ConfigurationError as exc:  # not connected: nothing went out
            raise Rejected(f"{exc}; nothing was sent, call again once it is back") from exc
        except Exception as exc:
            self._drop()
            raise OutcomeUnknown(f"{self.name}.{tool}: {type(exc).__name__}: {exc}") from exc

    async def _call_with_headers(self, tool: str, args: dict[str, Any],
                                 meta: dict[str, Any] | None, headers: dict[str, str],
                                 read_timeout: float) -> types.CallToolResult:
        async with Client(self._target(headers)) as client:
            return await client.call_tool(tool, args, read_timeout_seconds=read_timeout,
                                          meta=_meta(meta))

    def _drop(self) -> None:
        with self._lock:
            closed = self._closed
            self._client = None
        if closed is not None:
            self.loop.loop.call_soon_threadsafe(closed.set)

    def close(self) -> None:
        self._drop()


def _innermost(exc: BaseException) -> BaseException:
    """What a task group's error is about: its first error, unwrapped (anyio wraps a
    connection refused in an ExceptionGroup of one)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc
