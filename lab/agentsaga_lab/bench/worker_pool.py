"""How many of the sidecar's threads take work (`agentsaga.sidecar.worker_pool`): the default
(`AGENTSAGA_HOT_WORKERS`, a few busy threads, more only while calls wait on slow systems)
against every worker taking work (hot = AGENTSAGA_WORKERS, as a plain thread pool does), side
by side (`side_by_side`), with quick tools and with a tool that waits like a real system."""

from __future__ import annotations

from collections.abc import Callable

from agentsaga.settings import Settings
from agentsaga_lab.bench import side_by_side
from agentsaga_lab.bench.throughput import Load

SLOW_TOOL_MS = 20
"""The slow tool's wait: a quick real system (a warm HTTP call in the same region)."""


def measure(dsn: str, calls: int, seconds: float, runs: int, rounds: int,
            progress: Callable[[str], None]) -> dict[str, float]:
    """`sidecar_dispatch_{hot,all}_p50_ms`, `throughput_{runs}_runs_{hot,all}` (quick tool),
    `slow_throughput_{runs}_runs_{hot,all}` (a tool waiting SLOW_TOOL_MS), and the ratios
    `hot_vs_all_p50`, `hot_vs_all_throughput_{runs}` and `hot_vs_all_slow_throughput_{runs}`
    (>1: the default is better)."""
    defaults = Settings()
    figures = side_by_side.measure(
        dsn, {"hot": {}, "all": {"AGENTSAGA_HOT_WORKERS": str(defaults.workers)}},
        calls=calls, loads={"quick": Load(runs), "slow": Load(
            runs, tool="slow_noop", args={"ms": SLOW_TOOL_MS})},
        seconds=seconds, rounds=rounds,
        what=f"worker threads ({defaults.hot_workers} hot against all {defaults.workers})",
        progress=progress)
    out: dict[str, float] = {"hot_workers": defaults.hot_workers, "workers": defaults.workers}
    for name, found in figures.items():
        out[f"sidecar_dispatch_{name}_p50_ms"] = found.p50
        out[f"sidecar_dispatch_{name}_p99_ms"] = found.p99
        out[f"throughput_{runs}_runs_{name}"] = found.per_s["quick"]
        out[f"slow_throughput_{runs}_runs_{name}"] = found.per_s["slow"]
    out["hot_vs_all_p50"] = out["sidecar_dispatch_all_p50_ms"] / out["sidecar_dispatch_hot_p50_ms"]
    out[f"hot_vs_all_throughput_{runs}"] = (out[f"throughput_{runs}_runs_hot"]
                                            / out[f"throughput_{runs}_runs_all"])
    out[f"hot_vs_all_slow_throughput_{runs}"] = (out[f"slow_throughput_{runs}_runs_hot"]
                                                 / out[f"slow_throughput_{runs}_runs_all"])
    return out
