"""The world's shared settings and the lagging search index.

Real search indexes (Stripe search, Jira JQL, Zendesk search, provider send logs) see a write some
time after it happened. `LaggedIndex` keeps every version of every document with the time it was
written; a search sees, for each document, the newest version older than the current lag. The lag is
read at query time, so changing it takes effect at once, also for earlier writes.

Elapsed times are compared in whole nanoseconds: in floating point, a clock advanced by 0.29 s and
then 0.01 s can stand a hair short of one advanced by 0.3 s, and a document written exactly one lag
ago would be visible or not depending on where the clock started.
"""

from __future__ import annotations

import copy
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agentsaga_lab.world.accounts import Accounts


@dataclass
class WorldConfig:
    """Knobs shared by the stand-ins; changed at run time (`World`, `POST /_world/config`)."""

    search_lag: float = 0.0
    """Seconds before a write becomes visible to search endpoints (Stripe search, Jira JQL, ...)."""
    search_rate: float = 20.0
    """Stripe search requests allowed per second (all search endpoints together); beyond: 429."""
    clock: Callable[[], float] = time.monotonic
    """The monotonic clock that the search lag and the rate limit are measured on (a seam: tests
    pass a `ManualClock` and advance it instead of sleeping)."""
    accounts: Accounts = field(default_factory=Accounts)
    """What each stand-in's account allows (`agentsaga_lab.world.accounts`)."""


_SECOND = 1_000_000_000


def nanoseconds(seconds: float) -> int:
    """A span of time in whole nanoseconds, the resolution the world's times are compared at."""
    return round(seconds * _SECOND)


@dataclass
class LaggedIndex:
    """Versions of documents by id, each visible `config.search_lag` seconds after its write."""

    config: WorldConfig
    _versions: dict[str, list[tuple[float, dict[str, Any]]]] = field(default_factory=dict)

    def put(self, doc_id: str, doc: dict[str, Any]) -> None:
        """Record a new version of a document (a deep copy: later changes do not leak in)."""
        self._versions.setdefault(doc_id, []).append((self.config.clock(), copy.deepcopy(doc)))

    def visible(self, always: frozenset[str] = frozenset()) -> list[dict[str, Any]]:
        """The newest visible version of each document, in first-write order.

        Ids in `always` are read through to their newest version (Jira's `reconcileIssues`)."""
        now, lag = self.config.clock(), nanoseconds(self.config.search_lag)
        out: list[dict[str, Any]] = []
        for doc_id, versions in self._versions.items():
            if doc_id in always:
                out.append(versions[-1][1])
                continue
            seen = [doc for written, doc in versions if nanoseconds(now - written) >= lag]
            if seen:
                out.append(seen[-1])
        return out


@dataclass
class RateLimiter:
    """At most `config.search_rate` events in any one-second window."""

    config: WorldConfig
    _events: deque[float] = field(default_factory=deque)

    def allow(self) -> bool:
        now = self.config.clock()
        while self._events and nanoseconds(now - self._events[0]) >= _SECOND:
            self._events.popleft()
        if len(self._events) >= self.config.search_rate:
            return False
        self._events.append(now)
        return True


@dataclass
class ManualClock:
    """A monotonic clock that moves only when told to: `World(clock=ManualClock())`."""

    now: float = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"a monotonic clock cannot go back ({seconds}s)")
        self.now += seconds
