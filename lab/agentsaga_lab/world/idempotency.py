"""The idempotency layer shared by the stand-ins that honour an `Idempotency-Key` header, and the
gate every stand-in handler runs behind (pre-commit faults).

Stripe's rules, which Zendesk's and Resend's follow in their own words:

- the key is scoped by the caller's credentials (`Authorization`);
- the first request that *begins execution* stores its status and body; a retry with the same key
  and the same endpoint and parameters gets that stored answer back, executed once;
- the same key with a different endpoint or parameters is refused (`policy.mismatch`);
- while the first request is still executing, a retry is refused (`policy.in_flight`, a 409);
- responses marked `uncached(...)` (validation errors) are not stored, so the key stays free.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from urllib.parse import parse_qsl

from aiohttp import web

from agentsaga_lab.world.faults import Fault, before_commit

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class Route:
    """One endpoint of a stand-in; with a `policy`, `Idempotency-Key` is honoured on it."""

    method: str
    path: str
    handler: Handler
    policy: IdempotencyPolicy | None = None

FAULT: web.RequestKey[Fault] = web.RequestKey("world.fault", Fault)
STOPPING: web.AppKey[asyncio.Event] = web.AppKey("world.stopping", asyncio.Event)
_UNCACHED: web.ResponseKey[bool] = web.ResponseKey("world.uncached", bool)


def uncached(response: web.Response) -> web.Response:
    """Mark a response as one that did not begin execution: the idempotency layer won't store it."""
    response[_UNCACHED] = True
    return response


@dataclass(frozen=True)
class IdempotencyPolicy:
    """How one API words its idempotency answers."""

    name: str
    mismatch: Callable[[str], web.Response]
    in_flight: Callable[[str], web.Response]
    invalid_key: Callable[[str], web.Response]
    max_key_length: int = 255
    headers: Callable[[str, bool], Mapping[str, str]] = lambda key, replayed: {}
    """Extra response headers, given the key and whether this answer is a replay."""


@dataclass
class _Saved:
    fingerprint: str
    done: bool = False
    status: int = 0
    body: bytes = b""
    content_type: str = "application/json"


@dataclass
class IdempotencyStore:
    """Saved answers by (policy, credentials, key); cleared by `World.reset()`."""

    saved: dict[tuple[str, str, str], _Saved] = field(default_factory=dict)

    def keys_for(self, policy: str) -> list[str]:
        return [key for (name, _, key) in self.saved if name == policy]


async def fingerprint(request: web.Request) -> str:
    """Endpoint plus canonical parameters (form pairs sorted, JSON with sorted keys)."""
    raw = await request.read()
    body: str
    if request.content_type == "application/x-www-form-urlencoded":
        body = json.dumps(sorted(parse_qsl(raw.decode(), keep_blank_values=True)))
    elif request.content_type == "application/json" and raw:
        try:
            body = json.dumps(json.loads(raw), sort_keys=True)
        except ValueError:
            body = raw.decode(errors="replace")
    else:
        body = raw.decode(errors="replace")
    text = f"{request.method} {request.path}?{sorted(request.query.items())} {body}"
    return hashlib.sha256(text.encode()).hexdigest()


def gate(handler: Handler, store: IdempotencyStore, policy: IdempotencyPolicy | None) -> Handler:
    """Wrap a route handler: idempotency (with `policy`, when the request carries a key), then the
    pre-commit fault (if one hit this call), then the handler itself."""

    async def run(request: web.Request) -> web.StreamResponse:
        key = request.headers.get("Idempotency-Key")
        if policy is None or not key:
            return await _execute(request, handler)
        if len(key) > policy.max_key_length:
            return policy.invalid_key(key)
        scope = (policy.name, request.headers.get("Authorization", ""), key)
        fp = await fingerprint(request)
        saved = store.saved.get(scope)
        if saved is not None:
            if saved.fingerprint != fp:
                return policy.mismatch(key)
            if not saved.done:
                return policy.in_flight(key)
            replay = web.Response(
                status=saved.status, body=saved.body, content_type=saved.content_type
            )
            replay.headers.update(policy.headers(key, True))
            return replay
        saved = store.saved[scope] = _Saved(fingerprint=fp)
        try:
            response = await _execute(request, handler)
        except BaseException:
            store.saved.pop(scope, None)
            raise
        if response.get(_UNCACHED) or not isinstance(response, web.Response):
            store.saved.pop(scope, None)
        else:
            saved.done = True
            saved.status = response.status
            saved.body = bytes(response.body) if isinstance(response.body, bytes) else b""
            saved.content_type = response.content_type
        response.headers.update(policy.headers(key, False))
        return response

    return run


async def _execute(request: web.Request, handler: Handler) -> web.StreamResponse:
    fault = request.get(FAULT)
    if fault is not None:
        early = await before_commit(fault, request.app[STOPPING])
        if early is not None:
            if isinstance(early, web.Response) and fault.kind != "fail_500_cached":
                uncached(early)
            return early
    return await handler(request)
