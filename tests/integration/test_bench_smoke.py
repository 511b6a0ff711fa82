"""`agentsaga bench` end to end with tiny sizes: every documented key is there and positive,
the log-size and operator-scale measurements included (the operator against a real API server
behind `kubectl proxy`, given to the bench as --kube-url).

No timing assertions: this checks that the benchmark runs, not how fast the machine is."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from sagatest.cluster.kube import Kube, kubectl_proxy

ROOT = Path(__file__).resolve().parents[2]
KEYS = ("direct_p50_ms", "sidecar_dispatch_p50_ms", "sidecar_dispatch_p99_ms", "pure_p50_ms",
        "floor_commit_p50_ms", "floor_grpc_p50_ms", "throughput_per_s", "sidecar_rss_mb",
        "startup_s", "reconcile_batched_s", "reconcile_unbatched_s", "mcp_direct_p50_ms",
        "mcp_sidecar_p50_ms", "mcp_sidecar_p99_ms", "inproc_dispatch_p50_ms",
        "dispatch_p50_full_log_ms", "dispatch_p99_full_log_ms", "dispatch_p50_empty_log_ms",
        "operator_rss_mb", "eviction_to_job_s", "sidecar_dispatch_async_p50_ms",
        "sidecar_dispatch_group_p50_ms", "sidecar_dispatch_group_p99_ms",
        "throughput_1_runs_group", "throughput_32_runs_async", "throughput_32_runs_group",
        "group_vs_async_p50", "group_vs_async_throughput_32", "sidecar_dispatch_hot_p50_ms",
        "sidecar_dispatch_all_p50_ms", "throughput_32_runs_hot", "throughput_32_runs_all",
        "slow_throughput_32_runs_hot", "slow_throughput_32_runs_all",
        "hot_vs_all_throughput_32", "hot_vs_all_slow_throughput_32",
        "isolation_isolated_p50_ms", "isolation_unchecked_p50_ms", "isolation_isolated_per_s",
        "isolation_unchecked_per_s", "isolation_cost_p50", "isolation_cost_throughput")
PEERS = ("dbos_step_p50_ms", "restate_inhandler_step_p50_ms", "restate_remote_step_p50_ms",
         "temporal_durable_activity_p50_ms", "temporal_activity_ms", "restate_step_ms")


def test_bench_json_has_every_key(pg_server: str, kube_with_crds: Kube, tmp_path: Path) -> None:
    with kubectl_proxy(kube_with_crds) as kube_url:
        done = _bench(pg_server, kube_url, tmp_path)
    _check(done, kube_with_crds)
    assert list(tmp_path.iterdir()) == []  # no log or folder of its processes left behind


def _bench(pg_server: str, kube_url: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentsaga.cli", "bench", "--json", "--no-peers", "--calls", "50",
         "--seconds", "0.3", "--reconcile-rows", "30", "--reconcile-sample", "10",
         "--log-rows", "300", "--operator-scale", "20", "--kube-url", kube_url,
         "--operator-idle-seconds", "1", "--dsn", pg_server],
        capture_output=True, text=True, timeout=400, cwd=ROOT,
        env={**os.environ, "TMPDIR": str(tmp)})


def _check(done: subprocess.CompletedProcess[str], kube_with_crds: Kube) -> None:
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout)
    assert out.get("operator_error") is None, out.get("operator_error")
    for key in KEYS:
        assert isinstance(out[key], (int, float)) and out[key] > 0, key
    for key in PEERS:  # --no-peers: present, and reported as not measured
        assert key in out and out[key] is None
    assert isinstance(out["run"]["representative"], bool)  # the load watched during the run
    assert out["run"]["load_most"] >= 0 and out["run"]["others_load_most"] >= 0
    assert out["reconcile_rows"] == 30
    assert out["reconcile_found"] + out["reconcile_not_executed"] == 30
    assert out["reconcile_batched_requests"] < out["reconcile_unbatched_requests"]
    assert out["log_rows"] == 300
    assert out["operator_runs"] == 20 and out["operator_finished_runs"] == 18
    assert out["operator_idle_api_rps"] >= 0 and out["operator_idle_sql_qps"] >= 0
    # the objects are in the API server the bench was given
    runs = kube_with_crds.objects("agentsaga.io/v1alpha1", "agentruns", "default")
    assert len(runs) == 21  # 18 finished, 2 running, the one whose pod was evicted
    assert kube_with_crds.objects("batch/v1", "jobs", "default")


def test_operator_scale_needs_a_kube_url(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "agentsaga.cli", "bench", "--operator-scale",
                           "10"], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode != 0
    assert "--operator-scale needs --kube-url" in done.stderr
    assert "make bench-operator-scale" in done.stderr


def test_the_operator_scale_tool_brings_its_own_api_server(pg_server: str,
                                                            tmp_path: Path) -> None:
    """`make bench-operator-scale`: the stand-in and `kubectl proxy` started, used and stopped."""
    done = subprocess.run(
        [sys.executable, "-P", "tools/bench_operator_scale.py", "10", "--json", "--no-peers",
         "--calls", "20", "--seconds", "0.2", "--reconcile-rows", "10", "--reconcile-sample",
         "5", "--log-rows", "0", "--operator-idle-seconds", "1", "--dsn", pg_server],
        capture_output=True, text=True, timeout=400, cwd=ROOT,
        env={**os.environ, "TMPDIR": str(tmp_path)})
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout)
    assert out.get("operator_error") is None, out.get("operator_error")
    assert out["operator_runs"] == 10 and out["operator_finished_runs"] == 9
    assert out["eviction_to_job_s"] > 0
    assert list(tmp_path.iterdir()) == []  # its kubeconfig and kubectl's cache removed too


def test_the_operator_scale_tool_refuses_a_count_that_is_not_a_number(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-P", str(ROOT / "tools/bench_operator_scale.py"),
                           "many"], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 2
    assert "N: how many AgentRuns to create" in done.stderr
