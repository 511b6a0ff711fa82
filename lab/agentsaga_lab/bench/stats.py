"""Percentiles and timing loops."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Sample:
    """Latencies of one measurement, in milliseconds."""

    p50: float
    p99: float
    mean: float
    n: int

    @classmethod
    def of(cls, ms: Sequence[float]) -> Sample:
        if not ms:
            raise ValueError("no latencies to summarise")
        ordered = sorted(ms)
        return cls(percentile(ordered, 50), percentile(ordered, 99), sum(ordered) / len(ordered),
                   len(ordered))


def percentile(ordered: Sequence[float], q: float) -> float:
    """The q-th percentile of sorted values (nearest rank, interpolated)."""
    if len(ordered) == 1:
        return ordered[0]
    pos = (len(ordered) - 1) * q / 100.0
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def time_calls(fn: Callable[[int], object], calls: int, *, warmup: int = 20) -> Sample:
    """Call `fn(i)` `calls` times after `warmup` calls; the latency of each, in ms."""
    for i in range(warmup):
        fn(-1 - i)
    out: list[float] = []
    clock = time.perf_counter
    for i in range(calls):
        start = clock()
        fn(i)
        out.append((clock() - start) * 1000.0)
    return Sample.of(out)
