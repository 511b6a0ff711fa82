"""The regression gate, `agentsaga bench --compare BASELINE.json`: each figure of the hot path
as a ratio to the floors measured in the same run (so that a slower or busier machine moves
the figure and its floor together), against the same ratio in the baseline; a ratio that grew
by more than its tolerance fails the run (exit 1). Run it after any change to the dispatch path
(`make bench-check`: the quick form, against the project's `bench/baseline.json`).

    figure                          ratio of                                   may grow by
    in-process dispatch p50         p50 / durable INSERT+COMMIT floor p50          25%
    in-process dispatch p99         p99 / that floor's p99                          60%
    sidecar dispatch p50            p50 / (commit floor + gRPC floor) p50           25%
    sidecar dispatch p99            p99 / (commit floor + gRPC floor) p99           60%
    sidecar, a pure tool p50        p50 / gRPC round-trip floor p50                 25%
    throughput at 32 runs           (1 s / dispatches per s) / commit floor p50     30%
    MCP tool through the sidecar    p50 / the same tool called directly p50         30%
    isolation's cost                isolated p50 / unchecked p50 (same statements)  25%
    sidecar RSS idle                MiB (memory does not move with load)            10%

p99s move more than p50s on a shared machine, hence their wider tolerance. A figure the
baseline lacks is shown and not judged (a new figure); one the baseline has and the run lacks
fails (it stopped being measured).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Results = dict[str, Any]


def _get(run: Results, key: str) -> float | None:
    value = run.get(key)
    return float(value) if isinstance(value, (int, float)) and value > 0 else None


def _over(key: str, *floors: str) -> Callable[[Results], float | None]:
    def ratio(run: Results) -> float | None:
        value = _get(run, key)
        under = [_get(run, f) for f in floors]
        if value is None or any(f is None for f in under):
            return None
        return value / sum(f for f in under if f is not None)
    return ratio


def _throughput_cost(run: Results) -> float | None:
    per_s, floor = _get(run, "throughput_32_per_s"), _get(run, "floor_commit_p50_ms")
    return None if per_s is None or floor is None else (1000.0 / per_s) / floor


def _plain(key: str) -> Callable[[Results], float | None]:
    return lambda run: _get(run, key)


@dataclass(frozen=True)
class Figure:
    key: str
    label: str
    ratio: Callable[[Results], float | None]
    """The figure as a ratio (larger is worse), from a run's results; None: not measured."""
    tolerance: float
    """How much the ratio may grow over the baseline's before the gate fails (0.25: 25%)."""


FIGURES: tuple[Figure, ...] = (
    Figure("inproc_p50", "in-process dispatch p50 / commit floor",
           _over("inproc_dispatch_p50_ms", "floor_commit_p50_ms"), 0.25),
    Figure("inproc_p99", "in-process dispatch p99 / commit floor p99",
           _over("inproc_dispatch_p99_ms", "floor_commit_p99_ms"), 0.60),
    Figure("sidecar_p50", "sidecar dispatch p50 / (commit + gRPC floors)",
           _over("sidecar_dispatch_p50_ms", "floor_commit_p50_ms", "floor_grpc_p50_ms"), 0.25),
    Figure("sidecar_p99", "sidecar dispatch p99 / (commit + gRPC floors) p99",
           _over("sidecar_dispatch_p99_ms", "floor_commit_p99_ms", "floor_grpc_p99_ms"), 0.60),
    Figure("pure_p50", "sidecar pure tool p50 / gRPC floor",
           _over("pure_p50_ms", "floor_grpc_p50_ms"), 0.25),
    Figure("throughput_32", "time per dispatch at 32 runs / commit floor",
           _throughput_cost, 0.30),
    Figure("mcp_p50", "MCP tool via the sidecar / called directly (p50)",
           _over("mcp_sidecar_p50_ms", "mcp_direct_p50_ms"), 0.30),
    Figure("isolation_p50", "isolated / unchecked dispatch (p50)",
           _plain("isolation_cost_p50"), 0.25),
    Figure("rss_idle", "sidecar RSS idle (MiB)", _plain("sidecar_rss_idle_mb"), 0.10),
)


@dataclass(frozen=True)
class Verdict:
    figure: Figure
    baseline: float | None
    now: float | None

    @property
    def growth(self) -> float | None:
        """How much the ratio grew over the baseline's (0.1: 10% worse; negative: better)."""
        if self.baseline is None or self.now is None:
            return None
        return self.now / self.baseline - 1.0

    @property
    def ok(self) -> bool:
        if self.baseline is None:
            return True  # a figure the baseline does not have yet: shown, not judged
        growth = self.growth
        return growth is not None and growth <= self.figure.tolerance

    @property
    def word(self) -> str:
        if self.baseline is None:
            return "new"
        if self.now is None:
            return "NOT MEASURED"
        return "ok" if self.ok else "WORSE"


def compare(baseline: Results, run: Results,
            figures: tuple[Figure, ...] = FIGURES) -> list[Verdict]:
    return [Verdict(f, f.ratio(baseline), f.ratio(run)) for f in figures]


def passed(verdicts: list[Verdict]) -> bool:
    return all(v.ok for v in verdicts)


def report(verdicts: list[Verdict], baseline_name: str) -> str:
    """The table `--compare` prints, and the verdict under it."""
    width = max(len(v.figure.label) for v in verdicts)

    def num(value: float | None) -> str:
        return "-" if value is None else f"{value:.3f}"

    lines = [f"regression gate: each figure's ratio to the floors of its own run, against "
             f"{baseline_name}",
             f"{'figure':<{width}}  {'baseline':>9}  {'now':>9}  {'change':>7}  "
             f"{'may grow':>8}  verdict"]
    for v in verdicts:
        change = "-" if v.growth is None else f"{v.growth:+.0%}"
        lines.append(f"{v.figure.label:<{width}}  {num(v.baseline):>9}  {num(v.now):>9}  "
                     f"{change:>7}  {v.figure.tolerance:>+8.0%}  {v.word}")
    failed = [v for v in verdicts if not v.ok]
    if failed:
        lines.append(f"FAILED: {len(failed)} figure(s) grew beyond their tolerance or were not "
                     "measured: " + "; ".join(v.figure.label for v in failed)
                     + ". Find the cause (a profile, the statements per call) before merging, "
                     "or, for a change that is worth its cost, write a new baseline "
                     "(docs/benchmarks/index.md).")
    else:
        lines.append("passed: no figure grew beyond its tolerance")
    return "\n".join(lines)
