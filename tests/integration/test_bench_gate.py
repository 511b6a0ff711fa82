"""`agentsaga bench --compare BASELINE` end to end on a tiny workload: the exit code says whether
a figure grew beyond its tolerance against the baseline. The baselines are made up so that the
verdict does not depend on the machine: one whose ratios no run can reach (every figure is
worse now: exit 1), one whose ratios every run beats (exit 0). No timing assertion."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from agentsaga_lab.bench import gate

ROOT = Path(__file__).resolve().parents[2]
TINY = ("--no-peers", "--calls", "20", "--seconds", "0.2", "--reconcile-rows", "10",
        "--reconcile-sample", "5", "--log-rows", "0")


def crafted(figure: float) -> dict[str, Any]:
    """A baseline whose floors are 1 ms and every figure `figure` (in ms, MiB, or as a ratio):
    tiny, and any run is worse than it; huge, and any run is better."""
    base: dict[str, Any] = {f"floor_{f}_{p}_ms": 1.0 for f in ("commit", "grpc")
                            for p in ("p50", "p99")}
    for key in ("inproc_dispatch", "sidecar_dispatch"):
        base[f"{key}_p50_ms"] = base[f"{key}_p99_ms"] = figure
    base.update(pure_p50_ms=figure, mcp_direct_p50_ms=1.0, mcp_sidecar_p50_ms=figure,
                isolation_cost_p50=figure, sidecar_rss_idle_mb=figure,
                throughput_32_per_s=1000.0 / figure)  # figure ms per dispatch
    return base


def bench(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agentsaga.cli", "bench", "--json", *args],
                          capture_output=True, text=True, timeout=600, cwd=cwd)


def test_the_gate_fails_a_run_worse_than_the_baseline_and_passes_one_better(
        pg_server: str, tmp_path: Path) -> None:
    worse_than_now = tmp_path / "fail.json"
    worse_than_now.write_text(json.dumps(crafted(1e-6)))
    done = bench(*TINY, "--dsn", pg_server, "--compare", str(worse_than_now), cwd=ROOT)
    assert done.returncode == 1, done.stderr[-3000:]
    run = json.loads(done.stdout)  # the run's figures are printed whatever the verdict
    assert "FAILED: " in done.stderr
    for figure in gate.FIGURES:
        assert figure.ratio(run) is not None, f"{figure.key} was not measured"
        assert f"{figure.label}" in done.stderr

    # the same run against a baseline it beats on every figure: exit 0
    saved = tmp_path / "run.json"
    saved.write_text(done.stdout)
    better_than_now = tmp_path / "pass.json"
    better_than_now.write_text(json.dumps(crafted(1e6)))
    again = bench("--from-json", str(saved), "--compare", str(better_than_now), cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "passed: no figure grew beyond its tolerance" in again.stderr


def test_a_baseline_that_cannot_be_read_is_refused_before_measuring(tmp_path: Path) -> None:
    done = bench("--compare", str(tmp_path / "missing.json"), cwd=tmp_path)
    assert done.returncode == 1
    assert "--compare" in done.stderr and "cannot read a run saved with --json" in done.stderr
    assert "bench: starting Postgres" not in done.stderr
