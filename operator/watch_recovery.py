"""A watch that reads a response it cannot decode lists again instead of ending the operator.

kopf lists, then watches, every resource it serves. A connection error, a connection cut in the
middle of a body or a timeout starts that again (a fresh list), but a response that arrives
whole and still cannot be read raises out of kopf's watcher, and a failed watcher ends the
operator (exit 1). Such responses happen on the way, not in the API server:

    gzip read as text            a proxy dropped `Content-Encoding: gzip` from a compressed list
                                 (UnicodeDecodeError: byte 0x8b, the second of gzip's magic)
    a body cut short, cleanly    a list or a watch event line that ends in the middle of its
                                 JSON, the response itself ended as if it were whole
                                 (json.JSONDecodeError)
    not JSON at all              an error page with status 200 (aiohttp.ContentTypeError)

Here such a response is logged and the watch starts over with a fresh list after a back-off
(`settings.networking.error_backoffs`, its last step repeated; the next watch event read whole
resets it), as kopf does after a cut connection. Nothing is lost: the fresh list is every object
as it is now, and kopf handles each as it would after any reconnection.

kopf has no setting for this: `install()` wraps its `continuous_watch` (the one list-then-watch
generator, which kopf's `infinite_watch` starts again whenever it returns), and refuses to run
an operator on a kopf that no longer has it.
"""

from __future__ import annotations

import asyncio
import collections.abc
import contextlib
import json
import logging
from collections.abc import AsyncGenerator, Callable
from typing import Any

import aiohttp
from kopf._cogs.clients import watching

logger = logging.getLogger(__name__)

UNREADABLE: tuple[type[Exception], ...] = (
    UnicodeDecodeError, json.JSONDecodeError, aiohttp.ContentTypeError)
"""What kopf raises on a response that arrived whole and cannot be read as JSON."""

_MARK = "_agentsaga_recovers"

Watch = Callable[..., AsyncGenerator[Any, None]]


def install() -> None:
    """Wrap kopf's list-then-watch once per process (again: nothing more)."""
    current = getattr(watching, "continuous_watch", None)
    if current is None or not callable(current):
        raise RuntimeError(
            "this kopf has no kopf._cogs.clients.watching.continuous_watch: the operator "
            "cannot make its watches outlive an unreadable response; install the kopf "
            "version that uv.lock pins")
    if getattr(current, _MARK, False):
        return
    setattr(watching, "continuous_watch", recovering(current))  # noqa: B010  (kopf's module)


def backoff(steps: float | collections.abc.Iterable[float], failures: int) -> float:
    """The delay before the fresh list after `failures` unreadable responses in a row."""
    if not isinstance(steps, collections.abc.Iterable):
        return float(steps)
    delays = list(steps) or [1.0]
    return float(delays[min(failures, len(delays)) - 1])


def recovering(watch: Watch) -> Watch:
    """`watch` (kopf's `continuous_watch`) that ends after an unreadable response, logged and
    backed off, where kopf's would raise; kopf's caller then starts it again."""
    failures: dict[tuple[str, str | None], int] = {}

    async def continuous_watch(*, settings: Any, resource: Any, namespace: str | None,
                               **kwargs: Any) -> AsyncGenerator[Any, None]:
        key = (str(resource), namespace)
        try:
            async with contextlib.aclosing(watch(settings=settings, resource=resource,
                                                 namespace=namespace, **kwargs)) as events:
                async for event in events:
                    if isinstance(event, dict) and event.get("type") is not None:
                        failures.pop(key, None)  # a watch event (a listed object's is None)
                    yield event
        except UNREADABLE as exc:
            count = failures[key] = failures.get(key, 0) + 1
            delay = backoff(settings.networking.error_backoffs, count)
            where = f"in {namespace!r}" if namespace is not None else "cluster-wide"
            logger.warning(
                "unreadable response from the API server while watching %s %s (%s: %s; %d in "
                "a row): listing them again in %.1f s", resource, where,
                type(exc).__name__, exc, count, delay)
            await asyncio.sleep(delay)

    setattr(continuous_watch, _MARK, True)  # noqa: B010
    return continuous_watch
