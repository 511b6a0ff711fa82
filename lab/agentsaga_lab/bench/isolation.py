"""What isolation costs: the same dispatch with the row-level checks and the guarding triggers
(the namespace credential on the bench's database) and without them (the same credential on a
twin database where row-level security and every trigger of the runs' tables are off), side by
side in one run, in alternating order `rounds` times; each figure is the median of its rounds.

    isolated ...... in-process p50/p99, and dispatches/s through a sidecar at `runs` runs
    unchecked ..... the same statements, nothing that isolates the namespaces
    isolation_cost_p50 = isolated p50 / unchecked p50 (and p99); isolation_cost_throughput =
    unchecked throughput / isolated throughput: above 1 is what isolation costs
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from typing import Any

from agentsaga_lab.bench import overhead, throughput
from agentsaga_lab.bench.processes import (
    NAMESPACE,
    BenchDatabase,
    Sidecar,
    start_sidecar,
    tenant_env,
)

VARIANTS = ("isolated", "unchecked")


def measure(database: BenchDatabase, *, calls: int, seconds: float, runs: int, rounds: int,
            progress: Callable[[str], None]) -> dict[str, Any]:
    """The figures of both variants and their ratios (keys as the module's docstring says)."""
    name = f"agentsaga_bench_unchecked_{os.getpid()}_{int(time.time())}"
    dsns = {"isolated": database.tenant_dsn,
            "unchecked": database.twin_without_row_checks(name)}
    p50: dict[str, list[float]] = {v: [] for v in VARIANTS}
    p99: dict[str, list[float]] = {v: [] for v in VARIANTS}
    per_s: dict[str, list[float]] = {v: [] for v in VARIANTS}
    sidecars: dict[str, Sidecar] = {}
    try:
        for variant in VARIANTS:
            sidecars[variant] = start_sidecar(dsns[variant], env=tenant_env())
        for n in range(rounds):
            order = list(VARIANTS) if n % 2 == 0 else list(VARIANTS)[::-1]
            progress(f"isolation's cost, round {n + 1} of {rounds}: {' then '.join(order)}")
            for variant in order:
                sample = overhead.in_process(dsns[variant], calls, namespace=NAMESPACE)
                p50[variant].append(sample.p50)
                p99[variant].append(sample.p99)
            for variant in order:
                found, _ = throughput.measure(sidecars[variant], throughput.Load(runs), seconds)
                per_s[variant].append(found.per_s)
    finally:
        for sidecar in sidecars.values():
            sidecar.stop()
    out: dict[str, Any] = {"isolation_runs": runs}
    for variant in VARIANTS:
        out[f"isolation_{variant}_p50_ms"] = statistics.median(p50[variant])
        out[f"isolation_{variant}_p99_ms"] = statistics.median(p99[variant])
        out[f"isolation_{variant}_per_s"] = statistics.median(per_s[variant])
    out["isolation_cost_p50"] = out["isolation_isolated_p50_ms"] / out["isolation_unchecked_p50_ms"]
    out["isolation_cost_p99"] = out["isolation_isolated_p99_ms"] / out["isolation_unchecked_p99_ms"]
    out["isolation_cost_throughput"] = (out["isolation_unchecked_per_s"]
                                        / out["isolation_isolated_per_s"])
    return out
