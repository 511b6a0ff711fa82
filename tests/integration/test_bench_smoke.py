"""`agentsaga bench` end to end with tiny sizes: every documented key is there and positive.

No timing assertions: this checks that the benchmark runs, not how fast the machine is."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KEYS = ("direct_p50_ms", "sidecar_dispatch_p50_ms", "sidecar_dispatch_p99_ms", "pure_p50_ms",
        "floor_commit_p50_ms", "floor_grpc_p50_ms", "throughput_per_s", "sidecar_rss_mb",
        "startup_s", "reconcile_batched_s", "reconcile_unbatched_s", "mcp_direct_p50_ms",
        "mcp_sidecar_p50_ms", "mcp_sidecar_p99_ms")
PEERS = ("dbos_step_p50_ms", "temporal_activity_ms", "restate_step_ms")


def test_bench_json_has_every_key(pg_server: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "agentsaga.cli", "bench", "--json", "--no-peers", "--calls", "50",
         "--seconds", "0.3", "--reconcile-rows", "30", "--reconcile-sample", "10",
         "--dsn", pg_server],
        capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout)
    for key in KEYS:
        assert isinstance(out[key], (int, float)) and out[key] > 0, key
    for key in PEERS:  # --no-peers: present, and reported as not measured
        assert key in out and out[key] is None
    assert out["reconcile_rows"] == 30
    assert out["reconcile_found"] + out["reconcile_not_executed"] == 30
    assert out["reconcile_batched_requests"] < out["reconcile_unbatched_requests"]
