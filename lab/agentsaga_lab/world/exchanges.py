"""The world's exchange log: every request a stand-in received and the answer it gave, as they
crossed the HTTP edge (after idempotency replay and faults), for contract checks and call logs.

    world.exchanges()            -> [Exchange, ...] oldest first
    GET /_world/exchanges        -> the same as JSON (bodies as text)

The log keeps the newest exchanges, at most `limit` of them (10,000) and `max_bytes` of bodies
(32 MiB), so that a long-running `agentsaga world` or a benchmark does not grow without bound;
`World.reset()` empties it.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Exchange:
    """One request and its answer, as bytes on the wire."""

    method: str
    path: str
    query: tuple[tuple[str, str], ...]
    headers: tuple[tuple[str, str], ...]
    body: bytes
    status: int
    response_headers: tuple[tuple[str, str], ...]
    response_body: bytes
    raw_path: str = ""
    """The path as sent, percent-encoding kept (`path` is decoded)."""

    def header(self, name: str) -> str | None:
        """A request header by case-insensitive name (the first one)."""
        wanted = name.lower()
        return next((v for k, v in self.headers if k.lower() == wanted), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "method": self.method, "path": self.path, "raw_path": self.raw_path,
            "query": [list(q) for q in self.query],
            "headers": dict(self.headers), "body": self.body.decode(errors="replace"),
            "status": self.status, "response_headers": dict(self.response_headers),
            "response_body": self.response_body.decode(errors="replace"),
        }


@dataclass
class ExchangeLog:
    """The newest exchanges (at most `limit`, at most `max_bytes` of bodies), oldest first."""

    limit: int = 10_000
    max_bytes: int = 32 * 2**20
    _items: deque[Exchange] = field(default_factory=deque)
    _bytes: int = 0

    def add(self, exchange: Exchange) -> None:
        self._items.append(exchange)
        self._bytes += _size(exchange)
        while len(self._items) > self.limit or (self._bytes > self.max_bytes
                                                and len(self._items) > 1):
            self._bytes -= _size(self._items.popleft())

    def list(self) -> list[Exchange]:
        return list(self._items)

    def clear(self) -> None:
        self._items.clear()
        self._bytes = 0


def _size(exchange: Exchange) -> int:
    return len(exchange.body) + len(exchange.response_body)
