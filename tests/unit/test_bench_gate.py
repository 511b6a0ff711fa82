"""The regression gate's comparison (`agentsaga bench --compare`): each figure as a ratio to the
floors of its own run, against the baseline's; a ratio grown beyond its tolerance fails, one
within passes, whatever the machine's speed. Not timed: the runs here are made-up results."""

from __future__ import annotations

from typing import Any

from agentsaga_lab.bench import gate


def run(scale: float = 1.0, **changed: float) -> dict[str, Any]:
    """A run's results: every figure the gate reads, the times multiplied by `scale` (a slower
    or busier machine moves the figures and their floors together)."""
    times = {"floor_commit_p50_ms": 0.25, "floor_commit_p99_ms": 0.6,
             "floor_grpc_p50_ms": 0.35, "floor_grpc_p99_ms": 0.9,
             "inproc_dispatch_p50_ms": 0.7, "inproc_dispatch_p99_ms": 1.8,
             "sidecar_dispatch_p50_ms": 1.3, "sidecar_dispatch_p99_ms": 3.0,
             "pure_p50_ms": 0.45, "mcp_direct_p50_ms": 3.0, "mcp_sidecar_p50_ms": 5.0}
    out: dict[str, Any] = {k: v * scale for k, v in times.items()}
    out.update(throughput_32_per_s=1500 / scale, isolation_cost_p50=1.1,
               sidecar_rss_idle_mb=62.0)
    out.update(changed)
    return out


def verdict(verdicts: list[gate.Verdict], key: str) -> gate.Verdict:
    return next(v for v in verdicts if v.figure.key == key)


def test_the_same_run_on_a_machine_twice_as_slow_passes() -> None:
    verdicts = gate.compare(run(), run(scale=2.0))
    assert gate.passed(verdicts)
    assert all(v.word == "ok" for v in verdicts)
    assert abs(verdict(verdicts, "sidecar_p50").growth or 0.0) < 1e-9


def test_a_dispatch_slower_beyond_its_tolerance_fails_and_names_the_figure() -> None:
    # 0.7 -> 0.9 ms over the same floor: +29%, beyond in-process p50's 25%
    verdicts = gate.compare(run(), run(inproc_dispatch_p50_ms=0.9))
    assert not gate.passed(verdicts)
    failed = [v.figure.key for v in verdicts if not v.ok]
    assert failed == ["inproc_p50"]
    text = gate.report(verdicts, "bench/baseline.json")
    assert "in-process dispatch p50 / commit floor" in text and "WORSE" in text
    assert text.splitlines()[-1].startswith("FAILED: 1 figure(s)")


def test_a_figure_slower_within_its_tolerance_passes() -> None:
    # +20% on in-process p50 (tolerance 25%), +50% on its p99 (tolerance 60%)
    verdicts = gate.compare(run(), run(inproc_dispatch_p50_ms=0.84,
                                       inproc_dispatch_p99_ms=2.7))
    assert gate.passed(verdicts)
    assert round(verdict(verdicts, "inproc_p50").growth or 0.0, 2) == 0.2
    assert gate.report(verdicts, "b.json").splitlines()[-1].startswith("passed")


def test_the_floor_alone_getting_slower_is_not_a_regression() -> None:
    # the commit floor doubled and the dispatch with it: the ratio holds
    base = run()
    slower = run(floor_commit_p50_ms=0.5, inproc_dispatch_p50_ms=1.4)
    assert verdict(gate.compare(base, slower), "inproc_p50").ok


def test_throughput_falling_counts_as_a_growing_cost() -> None:
    verdicts = gate.compare(run(), run(throughput_32_per_s=1000))  # 1.5x the time per dispatch
    assert not verdict(verdicts, "throughput_32").ok
    assert gate.compare(run(), run(throughput_32_per_s=2000))[5].ok


def test_memory_is_compared_in_mib_and_isolation_as_its_own_ratio() -> None:
    verdicts = gate.compare(run(), run(sidecar_rss_idle_mb=99.0, isolation_cost_p50=1.5))
    assert {v.figure.key for v in verdicts if not v.ok} == {"rss_idle", "isolation_p50"}


def test_a_figure_the_baseline_lacks_is_shown_not_judged() -> None:
    base = run()
    del base["isolation_cost_p50"]
    verdicts = gate.compare(base, run())
    assert verdict(verdicts, "isolation_p50").word == "new"
    assert gate.passed(verdicts)


def test_a_figure_that_stopped_being_measured_fails() -> None:
    now = run()
    del now["mcp_sidecar_p50_ms"]
    verdicts = gate.compare(run(), now)
    assert verdict(verdicts, "mcp_p50").word == "NOT MEASURED"
    assert not gate.passed(verdicts)
