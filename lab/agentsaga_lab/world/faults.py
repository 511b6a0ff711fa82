"""Fault injection: what the world does to a call instead of (or after) answering it normally.

A `Fault` names an endpoint (HTTP method and a path pattern, `*` matching one path segment, e.g.
`/v1/payment_intents/*/capture`), a kind, and which matching calls it hits: `on_call=N` (the
N-th matching call, 1-based, counted from when the fault was added), `times=N` (the first N
matching calls) or neither (every matching call).

Kinds, and whether the state change happens:

    kind                     committed?  what the client sees
    commit_then_504          yes         HTTP 504 with an HTML body (a gateway gave up)
    commit_then_reset        yes         the TCP connection is reset, no HTTP response
    drop_response            yes         nothing: the connection stays open until the client
                                         gives up (or `seconds` pass, then it is reset)
    delay                    yes         the normal answer, `seconds` late (an idempotency key
                                         stays in flight meanwhile: a retry gets 409)
    hold                     yes         as `delay`, held until `Fault.release()` (or `seconds`
                                         pass): a test decides when the call goes on, not a clock
    reject                   no          HTTP `status` with the JSON `body` given
    fail_before_commit_502   no          HTTP 502 with an HTML body
    fail_500_cached          no          HTTP 500 (JSON `body` or a Stripe-style api_error) that
                                         the idempotency layer saves: a retry with the same key
                                         gets the same 500 back (Stripe caches 500s)

`reject` and `fail_before_commit_502` answers are never saved under an idempotency key.

A fault is checked whole when it is made (`Fault.__post_init__`, and `Fault.from_dict` for
`POST /_world/faults`, which also refuses a field its kind does not use): a bad one is a
ValueError naming the field, and no fault is added, rather than one that breaks the calls it
matches.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import fnmatch
import json
import math
import re
import socket
import struct
import threading
from dataclasses import dataclass, field, fields
from typing import Any, Literal, get_args

from aiohttp import web

FaultKind = Literal[
    "commit_then_504",
    "commit_then_reset",
    "drop_response",
    "delay",
    "hold",
    "reject",
    "fail_before_commit_502",
    "fail_500_cached",
]
FAULT_KINDS: tuple[str, ...] = get_args(FaultKind)
PRE_COMMIT_KINDS = frozenset({"delay", "hold", "reject", "fail_before_commit_502",
                              "fail_500_cached"})


FIELDS = ("method", "path", "kind", "on_call", "times", "seconds", "status", "body")
"""What `POST /_world/faults` takes."""
KIND_FIELDS: dict[str, tuple[str, ...]] = {
    "seconds": ("delay", "hold", "drop_response"),
    "status": ("reject",),
    "body": ("reject", "fail_500_cached"),
}
"""The fields only some kinds use: given for another kind, a request is refused rather than
taken without them."""
_METHOD = re.compile(r"\*|[A-Za-z]+")


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _json_type(value: Any) -> str:
    names = {list: "list", str: "string", int: "number", float: "number", bool: "boolean"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


@dataclass
class Fault:
    """One injected fault; see the module docstring for the kinds."""

    method: str
    """HTTP method, or `*` for any."""
    path: str
    """Path pattern; `*` matches within one segment (`/v1/payment_intents/*/capture`)."""
    kind: FaultKind
    on_call: int | None = None
    """Hit only the N-th matching call (1-based)."""
    times: int | None = None
    """Hit the first N matching calls. With neither `on_call` nor `times`: every matching call."""
    seconds: float = 30.0
    """`delay`: how long to wait before answering; `hold`, `drop_response`: the longest hold."""
    status: int = 400
    """`reject`: the HTTP status."""
    body: Any = None
    """`reject`, `fail_500_cached`: the JSON body (default: a Stripe-style error object)."""
    seen: int = field(default=0, compare=False)
    """Matching calls so far."""
    fired: int = field(default=0, compare=False)
    """Calls this fault hit so far."""
    released: threading.Event = field(default_factory=threading.Event, compare=False,
                                      repr=False)
    """`hold`: set by `release()`; the held calls go on."""

    def __post_init__(self) -> None:
        """Every field checked before the fault is added: one it could not apply is a
        ValueError saying which field and what it must be, and the fault set is unchanged."""
        if not isinstance(self.kind, str) or self.kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {self.kind!r}; expected one of "
                             f"{', '.join(FAULT_KINDS)}")
        if not isinstance(self.method, str) or not _METHOD.fullmatch(self.method):
            raise ValueError(f"fault method {self.method!r}: an HTTP method such as POST, or "
                             "'*' for any")
        if not isinstance(self.path, str) or not self.path.startswith("/"):
            raise ValueError(f"fault path {self.path!r}: a path starting with '/', such as "
                             "/v1/payment_intents/*/capture")
        for name in ("on_call", "times"):
            value = getattr(self, name)
            if value is not None and not (_whole(value) and value >= 1):
                raise ValueError(f"fault {name} {value!r}: a whole number of at least 1")
        if self.on_call is not None and self.times is not None:
            raise ValueError("give on_call or times, not both")
        if not (_number(self.seconds) and math.isfinite(self.seconds) and self.seconds >= 0):
            raise ValueError(f"fault seconds {self.seconds!r}: a finite number of seconds, at "
                             "least 0")
        if not (_whole(self.status) and 400 <= self.status <= 599):
            raise ValueError(f"fault status {self.status!r}: an HTTP error status, 400 to 599")
        try:
            json.dumps(self.body, allow_nan=False)
        except (TypeError, ValueError):
            raise ValueError("fault body: a JSON value") from None

    @classmethod
    def from_dict(cls, raw: Any) -> Fault:
        """Build from JSON (`POST /_world/faults`): an object with the fields of `Fault`;
        unknown fields, missing ones and fields the kind does not use are an error."""
        if not isinstance(raw, dict):
            raise ValueError(f"a fault is a JSON object with the fields {', '.join(FIELDS)}; "
                             f"got a JSON {_json_type(raw)}")
        extra = set(raw) - set(FIELDS)
        if extra:
            raise ValueError(f"unknown fault fields: {sorted(extra)}; a fault has "
                             f"{', '.join(FIELDS)}")
        missing = [name for name in ("method", "path", "kind") if name not in raw]
        if missing:
            raise ValueError(f"missing fault fields: {missing}")
        fault = cls(**raw)
        unused = sorted(name for name, kinds in KIND_FIELDS.items()
                        if name in raw and fault.kind not in kinds)
        if unused:
            raise ValueError(f"a {fault.kind} fault does not use {', '.join(unused)}: "
                             + "; ".join(f"{name} is for {', '.join(KIND_FIELDS[name])}"
                                         for name in unused))
        return fault

    def to_dict(self) -> dict[str, Any]:
        return {f.name: copy.deepcopy(getattr(self, f.name)) for f in fields(self)
                if f.name != "released"}

    def release(self) -> None:
        """`hold`: let the calls it holds (and any later ones it hits) go on."""
        self.released.set()

    def matches(self, method: str, path: str) -> bool:
        if self.method != "*" and self.method.upper() != method.upper():
            return False
        want, got = self.path.rstrip("/").split("/"), path.rstrip("/").split("/")
        return len(want) == len(got) and all(
            fnmatch.fnmatchcase(g, w) for w, g in zip(want, got, strict=True)
        )

    def _count(self) -> bool:
        """Count one matching call; True if this call is hit."""
        self.seen += 1
        if self.on_call is not None:
            hit = self.seen == self.on_call
        elif self.times is not None:
            hit = self.fired < self.times
        else:
            hit = True
        if hit:
            self.fired += 1
        return hit


class FaultSet:
    """The active faults; thread-safe (tests add faults from their own thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._faults: list[Fault] = []

    def add(self, fault: Fault) -> Fault:
        with self._lock:
            self._faults.append(fault)
        return fault

    def clear(self) -> None:
        with self._lock:
            self._faults.clear()

    def list(self) -> list[Fault]:
        with self._lock:
            return list(self._faults)

    def take(self, method: str, path: str) -> Fault | None:
        """Count this call against every matching fault; the first one that hits it, if any."""
        hit: Fault | None = None
        with self._lock:
            for fault in self._faults:
                if fault.matches(method, path) and fault._count() and hit is None:
                    hit = fault
        return hit


def _html(status: int, title: str) -> web.Response:
    body = f"<html><head><title>{status} {title}</title></head><body><h1>{title}</h1></body></html>"
    return web.Response(status=status, text=body, content_type="text/html")


async def before_commit(fault: Fault, stopping: asyncio.Event) -> web.StreamResponse | None:
    """Apply a pre-commit fault: a response to send instead of executing, or None to go on."""
    if fault.kind == "delay":
        await _wait(stopping, fault.seconds)
        return None
    if fault.kind == "hold":
        until = asyncio.get_running_loop().time() + fault.seconds
        while (not fault.released.is_set() and not stopping.is_set()
               and asyncio.get_running_loop().time() < until):
            await _wait(stopping, 0.01)
        return None
    if fault.kind == "reject":
        body = fault.body
        if body is None:
            body = {"error": {"type": "api_error", "message": "Rejected by an injected fault."}}
        return web.Response(
            status=fault.status, text=json.dumps(body), content_type="application/json"
        )
    if fault.kind == "fail_before_commit_502":
        return _html(502, "Bad Gateway")
    if fault.kind == "fail_500_cached":
        body = fault.body
        if body is None:
            body = {"error": {"type": "api_error", "message": "An unknown error occurred."}}
        return web.Response(status=500, text=json.dumps(body), content_type="application/json")
    return None


async def after_commit(
    fault: Fault, request: web.Request, stopping: asyncio.Event
) -> web.StreamResponse | None:
    """Apply a post-commit fault to an executed call; None means answer normally."""
    if fault.kind == "commit_then_504":
        return _html(504, "Gateway Time-out")
    if fault.kind == "commit_then_reset":
        reset_connection(request)
        return web.Response(status=500)  # never reaches the client: the transport is gone
    if fault.kind == "drop_response":
        waited = 0.0
        while waited < fault.seconds and not stopping.is_set():
            transport = request.transport
            if transport is None or transport.is_closing():
                break
            await _wait(stopping, 0.05)
            waited += 0.05
        reset_connection(request)
        return web.Response(status=500)
    return None


def reset_connection(request: web.Request) -> None:
    """Close the client's connection with a TCP RST (SO_LINGER 0), without an HTTP answer."""
    transport = request.transport
    if transport is None:
        return
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


async def _wait(stopping: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stopping.wait(), timeout=seconds)
