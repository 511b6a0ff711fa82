"""How to commit CONFIRMED outcomes (issue 17, item 2): today's `async` path (each dispatch's
own autocommit statement, no WAL flush wait) against `group` (concurrent dispatches' outcomes
written as one multi-row statement, each answered once its own row is committed), side by
side: two sidecars on the same database, timed in alternating order, `rounds` times, each
figure the median of its rounds. Only the ratios mean anything on a loaded machine."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field

from agentsaga.bench import overhead, throughput
from agentsaga.bench.processes import Sidecar, start_sidecar
from agentsaga.bench.stats import Sample

MODES = ("async", "group")


@dataclass
class ModeFigures:
    p50: list[float] = field(default_factory=list)
    p99: list[float] = field(default_factory=list)
    per_s: dict[int, list[float]] = field(default_factory=dict)


def measure(dsn: str, calls: int, seconds: float, levels: tuple[int, ...], rounds: int,
            progress: Callable[[str], None]) -> dict[str, float]:
    """`sidecar_dispatch_{mode}_p50_ms`/`_p99_ms`, `throughput_{level}_runs_{mode}` (per s),
    `group_vs_async_p50` and `group_vs_async_throughput_{level}` (>1: group is better)."""
    sidecars: dict[str, Sidecar] = {}
    figures = {mode: ModeFigures() for mode in MODES}
    try:
        for mode in MODES:
            sidecars[mode] = start_sidecar(dsn, env={"AGENTSAGA_OUTCOME_COMMIT": mode})
        for n in range(rounds):
            order = MODES if n % 2 == 0 else tuple(reversed(MODES))
            progress(f"outcome commit, round {n + 1} of {rounds}: {' then '.join(order)}")
            for mode in order:
                sample: Sample = overhead.through_sidecar(sidecars[mode].address, calls)
                figures[mode].p50.append(sample.p50)
                figures[mode].p99.append(sample.p99)
            for level in levels:
                for mode in order:
                    result, _ = throughput.measure(sidecars[mode], level, seconds)
                    figures[mode].per_s.setdefault(level, []).append(result.per_s)
    finally:
        for sidecar in sidecars.values():
            sidecar.stop()
    out: dict[str, float] = {}
    for mode, found in figures.items():
        out[f"sidecar_dispatch_{mode}_p50_ms"] = statistics.median(found.p50)
        out[f"sidecar_dispatch_{mode}_p99_ms"] = statistics.median(found.p99)
        for level, values in found.per_s.items():
            out[f"throughput_{level}_runs_{mode}"] = statistics.median(values)
    out["group_vs_async_p50"] = (out["sidecar_dispatch_async_p50_ms"]
                                 / out["sidecar_dispatch_group_p50_ms"])
    for level in levels:
        out[f"group_vs_async_throughput_{level}"] = (out[f"throughput_{level}_runs_group"]
                                                     / out[f"throughput_{level}_runs_async"])
    return out
