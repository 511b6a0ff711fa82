"""Two or more sidecars on one database, differing only in their environment, timed in
alternating order `rounds` times; each figure is the median of its rounds. Only the ratios
mean anything on a loaded machine."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from agentsaga_lab.bench import overhead, throughput
from agentsaga_lab.bench.processes import Sidecar, start_sidecar
from agentsaga_lab.bench.stats import Sample
from agentsaga_lab.bench.throughput import Load


@dataclass
class Figures:
    p50: float
    p99: float
    per_s: dict[str, float] = field(default_factory=dict)
    """Dispatches/s for each load, by its name."""


def measure(dsn: str, variants: Mapping[str, Mapping[str, str]], *, calls: int,
            loads: Mapping[str, Load], seconds: float, rounds: int, what: str,
            progress: Callable[[str], None]) -> dict[str, Figures]:
    """Each variant (a name and the sidecar's extra environment): sequential p50/p99 over
    `calls` dispatches, then each load for `seconds`."""
    sidecars: dict[str, Sidecar] = {}
    p50: dict[str, list[float]] = {name: [] for name in variants}
    p99: dict[str, list[float]] = {name: [] for name in variants}
    per_s: dict[str, dict[str, list[float]]] = {name: {} for name in variants}
    try:
        for name, env in variants.items():
            sidecars[name] = start_sidecar(dsn, env=dict(env))
        for n in range(rounds):
            order = list(variants) if n % 2 == 0 else list(variants)[::-1]
            progress(f"{what}, round {n + 1} of {rounds}: {' then '.join(order)}")
            for name in order:
                sample: Sample = overhead.through_sidecar(sidecars[name].address, calls)
                p50[name].append(sample.p50)
                p99[name].append(sample.p99)
            for load_name, load in loads.items():
                for name in order:
                    result, _ = throughput.measure(sidecars[name], load, seconds)
                    per_s[name].setdefault(load_name, []).append(result.per_s)
    finally:
        for sidecar in sidecars.values():
            sidecar.stop()
    return {name: Figures(statistics.median(p50[name]), statistics.median(p99[name]),
                          {load: statistics.median(v) for load, v in per_s[name].items()})
            for name in variants}
