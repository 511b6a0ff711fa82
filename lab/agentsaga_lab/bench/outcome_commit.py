"""How to commit CONFIRMED outcomes: today's `async` path (each dispatch's
own autocommit statement, no WAL flush wait) against `group` (concurrent dispatches' outcomes
written as one multi-row statement, each answered once its own row is committed), side by
side (`side_by_side`)."""

from __future__ import annotations

from collections.abc import Callable

from agentsaga_lab.bench import side_by_side
from agentsaga_lab.bench.throughput import Load

MODES = ("async", "group")


def measure(dsn: str, calls: int, seconds: float, levels: tuple[int, ...], rounds: int,
            progress: Callable[[str], None]) -> dict[str, float]:
    """`sidecar_dispatch_{mode}_p50_ms`/`_p99_ms`, `throughput_{level}_runs_{mode}` (per s),
    `group_vs_async_p50` and `group_vs_async_throughput_{level}` (>1: group is better)."""
    figures = side_by_side.measure(
        dsn, {mode: {"AGENTSAGA_OUTCOME_COMMIT": mode} for mode in MODES}, calls=calls,
        loads={str(level): Load(level) for level in levels}, seconds=seconds, rounds=rounds,
        what="outcome commit", progress=progress)
    out: dict[str, float] = {}
    for mode, found in figures.items():
        out[f"sidecar_dispatch_{mode}_p50_ms"] = found.p50
        out[f"sidecar_dispatch_{mode}_p99_ms"] = found.p99
        for level in levels:
            out[f"throughput_{level}_runs_{mode}"] = found.per_s[str(level)]
    out["group_vs_async_p50"] = (out["sidecar_dispatch_async_p50_ms"]
                                 / out["sidecar_dispatch_group_p50_ms"])
    for level in levels:
        out[f"group_vs_async_throughput_{level}"] = (out[f"throughput_{level}_runs_group"]
                                                     / out[f"throughput_{level}_runs_async"])
    return out
