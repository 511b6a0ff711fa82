"""Watch streams: replay from a resourceVersion, 410 Gone, bookmarks and watch-list."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from .errors import ApiError, status_body
from .resources import ResourceType
from .selectors import Predicate
from .store import Store, Watcher

INITIAL_EVENTS_END = "k8s.io/initial-events-end"
DEFAULT_TIMEOUT = 1800.0


def _line(type_: str, obj: dict[str, Any]) -> bytes:
    return json.dumps({"type": type_, "object": obj}, separators=(",", ":")).encode() + b"\n"


def _bookmark(rt: ResourceType, rv: int, initial_end: bool = False) -> bytes:
    meta: dict[str, Any] = {"resourceVersion": str(rv)}
    if initial_end:
        meta["annotations"] = {INITIAL_EVENTS_END: "true"}
    return _line("BOOKMARK", {"kind": rt.kind, "apiVersion": rt.api_version, "metadata": meta})


def _matches(rt: ResourceType, ns: str | None, predicate: Predicate, obj: dict[str, Any]) -> bool:
    if rt.namespaced and ns and obj["metadata"].get("namespace") != ns:
        return False
    return predicate(obj)


async def serve_watch(
    request: web.Request,
    store: Store,
    rt: ResourceType,
    ns: str | None,
    predicate: Predicate,
    params: Mapping[str, str],
    bookmark_interval: float,
) -> web.StreamResponse:
    send_initial = params.get("sendInitialEvents") == "true"
    if send_initial and params.get("resourceVersionMatch") != "NotOlderThan":
        raise ApiError(422, "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: "
                            "Forbidden: sendInitialEvents requires resourceVersionMatch="
                            "NotOlderThan", "Invalid")
    bookmarks = params.get("allowWatchBookmarks") == "true"
    timeout = float(params.get("timeoutSeconds") or DEFAULT_TIMEOUT)
    rv_param = params.get("resourceVersion") or ""
    deadline = time.monotonic() + timeout

    # Register before taking the snapshot; no await in between, so nothing is missed or doubled.
    watcher = Watcher(rt.key)
    store.watchers.add(watcher)
    try:
        first: list[bytes] = []
        if send_initial or rv_param in ("", "0"):
            first = [_line("ADDED", obj) for obj in store.list(rt, ns, predicate)]
            if send_initial:
                first.append(_bookmark(rt, store.rv, initial_end=True))
        else:
            try:
                since = int(rv_param)
            except ValueError as exc:
                raise ApiError(400, f"invalid resourceVersion {rv_param!r}") from exc
            events = store.events_since(rt.key, since)
            if events is None:
                gone = status_body(410, f"too old resource version: {since} "
                                        f"({store.compacted_rv})", "Expired")
                first = [_line("ERROR", gone)]
                deadline = 0.0
            else:
                first = [_line(e.type, store.present(rt, e.obj)) for e in events
                         if _matches(rt, ns, predicate, e.obj)]

        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        try:
            for line in first:
                await response.write(line)
            while (remaining := deadline - time.monotonic()) > 0:
                try:
                    event = await asyncio.wait_for(watcher.queue.get(),
                                                   min(remaining, bookmark_interval))
                except TimeoutError:
                    if bookmarks and remaining > bookmark_interval:
                        await response.write(_bookmark(rt, store.rv))
                    continue
                if event is None:  # the server is stopping
                    break
                if _matches(rt, ns, predicate, event.obj):
                    await response.write(_line(event.type, store.present(rt, event.obj)))
            await response.write_eof()
        except (ConnectionResetError, ConnectionError):
            pass
        return response
    finally:
        store.watchers.discard(watcher)
