"""Per-run request rate limit of the sidecar: a token bucket per run id.

A run may make `rate` calls per second on average and `burst` (default: one second's worth) at
once; a call over the limit is refused with RESOURCE_EXHAUSTED before anything is written, so
a looping agent cannot flood the real systems or the saga log.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from agentsaga.errors import RateLimited


class RunRateLimiter:
    def __init__(self, rate: float, *, burst: float | None = None,
                 clock: Callable[[], float] = time.monotonic, max_runs: int = 10_000,
                 what: str = "") -> None:
        self.rate = rate
        self.burst = max(1.0, burst if burst is not None else rate)
        self._clock = clock
        self._max_runs = max_runs
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()
        self._what = what

    def take(self, run_id: str) -> None:
        """Spend one call of `run_id`'s budget, or raise RateLimited."""
        if self.rate <= 0:
            return
        now = self._clock()
        with self._lock:
            tokens, since = self._buckets.get(run_id, (self.burst, now))
            tokens = min(self.burst, tokens + (now - since) * self.rate)
            if tokens < 1.0:
                self._buckets[run_id] = (tokens, now)
                what = (self._what.format(rate=self.rate, run=run_id) if self._what else
                        f"run {run_id!r} makes more than {self.rate:g} calls per second "
                        "(AGENTSAGA_MAX_CALLS_PER_S)")
                raise RateLimited(f"{what}; nothing was written or called. Slow down and "
                                  "call again.")
            if len(self._buckets) >= self._max_runs and run_id not in self._buckets:
                self._buckets.clear()  # bounded memory: idle runs start with a full bucket
            self._buckets[run_id] = (tokens - 1.0, now)

    def forget(self, run_id: str) -> None:
        """Drop the run's bucket (its run ended here): a bucket is per-run state too."""
        with self._lock:
            self._buckets.pop(run_id, None)
