"""`agentsaga bench`: every measurement of issue #9 in one run, side by side, as a table or JSON.

    agentsaga bench                 the full run (10,000-row reconcile: a few minutes)
    agentsaga bench --quick         under two minutes
    agentsaga bench --json          JSON instead of the table
    agentsaga bench --no-peers      skip DBOS, Temporal and Restate (reported as not measured)
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentsaga.bench import mcp_overhead, overhead, reconcile_scale, throughput
from agentsaga.bench.peers import SCRIPTS, PeerEnv
from agentsaga.bench.processes import Sidecar, bench_database, start_sidecar
from agentsaga.bench.stats import Sample

logger = logging.getLogger(__name__)

CONCURRENCY = (1, 8, 32)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--quick", action="store_true",
                        help="fewer calls and rows: finishes in under two minutes")
    parser.add_argument("--calls", type=int, help="timed calls per latency measurement "
                        "(default 2000, quick 500)")
    parser.add_argument("--seconds", type=float, help="seconds per throughput level "
                        "(default 5, quick 2)")
    parser.add_argument("--reconcile-rows", type=int, help="UNKNOWN Stripe rows to reconcile "
                        "(default 10000, quick 1000)")
    parser.add_argument("--reconcile-sample", type=int, help="rows reconciled one key per "
                        "query, extrapolated to --reconcile-rows (default 500, quick 100)")
    parser.add_argument("--no-peers", action="store_true",
                        help="do not install or measure DBOS, Temporal and Restate")
    parser.add_argument("--peers-dir", type=Path, default=Path("bench/.venv-peers"),
                        help="virtual environment for the peers (default bench/.venv-peers)")
    parser.add_argument("--dsn", help="admin DSN of a Postgres server to benchmark on "
                        "(default: an embedded one in a temporary folder)")


def _defaults(args: argparse.Namespace) -> None:
    quick = args.quick
    args.calls = args.calls or (500 if quick else 2000)
    args.seconds = args.seconds or (2.0 if quick else 5.0)
    args.reconcile_rows = args.reconcile_rows or (1000 if quick else 10000)
    args.reconcile_sample = args.reconcile_sample or (100 if quick else 500)
    args.reconcile_sample = min(args.reconcile_sample, args.reconcile_rows)


def run(args: argparse.Namespace) -> int:
    _defaults(args)
    for noisy in ("stripe", "httpx", "httpx2", "mcp", "pgserver"):  # a line per request otherwise
        logging.getLogger(noisy).setLevel(logging.WARNING)
    results = measure(args, progress=lambda what: print(f"bench: {what}", file=sys.stderr,
                                                          flush=True))
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print(render(results))
    return 0


def measure(args: argparse.Namespace, progress: Callable[[str], None]) -> dict[str, Any]:
    out: dict[str, Any] = {"calls": args.calls}
    progress("starting Postgres")
    dsn = bench_database(args.dsn)
    progress("starting the sidecar (start-up time)")
    starts: list[float] = []
    sidecar: Sidecar | None = None
    try:
        for _ in range(2 if args.quick else 3):
            if sidecar is not None:
                sidecar.stop()
            sidecar = start_sidecar(dsn)
            starts.append(sidecar.startup_s)
        assert sidecar is not None
        out["startup_s"] = statistics.median(starts)
        out["sidecar_rss_idle_mb"] = sidecar.rss_mb()
        _latencies(out, args.calls, dsn, sidecar, progress)
        progress("throughput through one sidecar")
        peak = out["sidecar_rss_idle_mb"]
        for level in CONCURRENCY:
            result, rss = throughput.measure(sidecar, level, args.seconds)
            out[f"throughput_{level}_per_s"] = result.per_s
            peak = max(peak, rss)
        out["throughput_per_s"] = max(out[f"throughput_{c}_per_s"] for c in CONCURRENCY)
        out["sidecar_rss_mb"] = peak
    finally:
        if sidecar is not None:
            sidecar.stop()
    progress("the MCP path: an upstream MCP tool directly and through the sidecar")
    mcp = mcp_overhead.measure(dsn, args.calls)
    _put(out, "mcp_direct", mcp.direct)
    _put(out, "mcp_sidecar", mcp.through_sidecar)
    _peers(out, args, dsn, progress)
    progress(f"reconciling {args.reconcile_rows} UNKNOWN Stripe rows at 20 searches/s")
    rec = reconcile_scale.measure(dsn, args.reconcile_rows, args.reconcile_sample)
    out.update(
        reconcile_rows=rec.rows, reconcile_found=rec.found, reconcile_not_executed=rec.not_executed,
        reconcile_batched_s=rec.batched_s, reconcile_batched_requests=rec.batched_requests,
        reconcile_unbatched_s=rec.unbatched_s, reconcile_unbatched_requests=rec.unbatched_requests,
        reconcile_unbatched_sample_rows=rec.sample_rows,
        reconcile_unbatched_sample_s=rec.sample_s,
        reconcile_unbatched_extrapolated=rec.sample_rows < rec.rows,
    )
    _ratios(out)
    return out


def _put(out: dict[str, Any], name: str, sample: Sample) -> None:
    out[f"{name}_p50_ms"] = sample.p50
    out[f"{name}_p99_ms"] = sample.p99


def _latencies(out: dict[str, Any], calls: int, dsn: str, sidecar: Sidecar,
               progress: Callable[[str], None]) -> None:
    progress(f"latencies ({calls} calls each)")
    _put(out, "direct", overhead.direct(calls))
    _put(out, "floor_commit", overhead.floor_commit(dsn, calls))
    _put(out, "floor_grpc", overhead.floor_grpc(sidecar.address, calls))
    _put(out, "inproc_dispatch", overhead.in_process(dsn, calls, async_outcomes=True))
    _put(out, "inproc_sync_outcome", overhead.in_process(dsn, calls, async_outcomes=False))
    _put(out, "sidecar_dispatch", overhead.through_sidecar(sidecar.address, calls))
    _put(out, "pure", overhead.through_sidecar(sidecar.address, calls, tool="pure_noop"))


def _peers(out: dict[str, Any], args: argparse.Namespace, dsn: str,
           progress: Callable[[str], None]) -> None:
    keys = {"dbos_step": "dbos_step.py", "temporal_activity": "temporal_activity.py",
            "restate_step": "restate_step.py"}
    for name in keys:
        out[f"{name}_p50_ms"] = out[f"{name}_p99_ms"] = None
    out["temporal_activity_ms"] = out["restate_step_ms"] = None
    out["peers_measured"] = []
    out["peers_errors"] = {}
    if args.no_peers:
        return
    env = PeerEnv(args.peers_dir.resolve())
    progress(f"installing the peers into {env.root} (first run only)")
    try:
        env.ensure()
    except Exception as exc:  # no registry, no npm: the peers are reported as not measured
        logger.warning("the peers could not be installed: %s", exc)
        out["peers_errors"] = {name: f"not installed: {exc}" for name in keys}
        return
    peer_calls = max(50, args.calls // 4)
    for name, script in keys.items():
        if not (SCRIPTS / script).exists():
            out["peers_errors"][name] = "no driver for this peer in this version"
            continue
        progress(f"peer: {name} ({peer_calls} steps)")
        try:
            # each driver bounds itself (start-up 60 s + 1 s a step); this is the backstop
            sample = env.run(script, dsn, str(peer_calls), timeout=90.0 + peer_calls)
        except Exception as exc:  # a peer that cannot run is reported, not fatal
            logger.warning("peer %s not measured: %s", name, exc)
            out["peers_errors"][name] = str(exc)[-500:]
            continue
        _put(out, name, sample)
        out["peers_measured"].append(name)
    out["temporal_activity_ms"] = out["temporal_activity_p50_ms"]
    out["restate_step_ms"] = out["restate_step_p50_ms"]


def _ratios(out: dict[str, Any]) -> None:
    side = out["sidecar_dispatch_p50_ms"]
    out["sidecar_overhead_p50_ms"] = side - out["direct_p50_ms"]
    out["sidecar_overhead_p99_ms"] = out["sidecar_dispatch_p99_ms"] - out["direct_p99_ms"]
    out["sidecar_vs_floor_commit"] = side / out["floor_commit_p50_ms"]
    out["sidecar_vs_inproc"] = side / out["inproc_dispatch_p50_ms"]
    out["sync_vs_async_outcome"] = (out["inproc_sync_outcome_p50_ms"]
                                    / out["inproc_dispatch_p50_ms"])
    out["mcp_overhead_p50_ms"] = out["mcp_sidecar_p50_ms"] - out["mcp_direct_p50_ms"]
    out["mcp_overhead_p99_ms"] = out["mcp_sidecar_p99_ms"] - out["mcp_direct_p99_ms"]
    for peer in ("dbos_step", "temporal_activity", "restate_step"):
        value = out.get(f"{peer}_p50_ms")
        out[f"{peer}_vs_sidecar"] = None if not value else value / side


def _ms(value: Any) -> str:
    return "not measured" if value is None else f"{value:.3f}"


def render(out: dict[str, Any]) -> str:
    """The table printed by `agentsaga bench` (and pasted into the README)."""
    rows: list[tuple[str, str, str, str]] = []

    def lat(label: str, key: str, note: str = "") -> None:
        rows.append((label, _ms(out.get(f"{key}_p50_ms")), _ms(out.get(f"{key}_p99_ms")), note))

    side = out["sidecar_dispatch_p50_ms"]

    def vs(key: str) -> str:
        value = out.get(f"{key}_p50_ms")
        return "" if not value else f"{value / side:.1f}x the sidecar"

    lat("direct call (no harness)", "direct")
    lat("floor: durable INSERT+COMMIT", "floor_commit")
    lat("floor: gRPC round trip", "floor_grpc")
    lat("in-process dispatcher", "inproc_dispatch", "async outcome commit")
    lat("in-process, sync outcome", "inproc_sync_outcome",
        f"{out['sync_vs_async_outcome']:.2f}x async")
    lat("sidecar dispatch (gRPC)", "sidecar_dispatch",
        f"overhead {out['sidecar_overhead_p50_ms']:.3f} / {out['sidecar_overhead_p99_ms']:.3f}")
    lat("sidecar, pure tool", "pure")
    lat("upstream MCP tool, direct", "mcp_direct")
    lat("upstream MCP tool, via sidecar", "mcp_sidecar",
        f"overhead {out['mcp_overhead_p50_ms']:.3f} / {out['mcp_overhead_p99_ms']:.3f}")
    lat("peer: DBOS step", "dbos_step", vs("dbos_step"))
    lat("peer: Temporal activity", "temporal_activity", vs("temporal_activity"))
    lat("peer: Restate ctx.run", "restate_step", vs("restate_step"))
    width = max(len(r[0]) for r in rows)
    lines = [f"{'latency (ms)':<{width}}  {'p50':>12}  {'p99':>12}  note",
             f"{'-' * width}  {'-' * 12}  {'-' * 12}  ----"]
    lines += [f"{a:<{width}}  {b:>12}  {c:>12}  {d}" for a, b, c, d in rows]
    lines.append("")
    tp = ", ".join(f"{c} runs {out[f'throughput_{c}_per_s']:.0f}/s" for c in CONCURRENCY)
    lines.append(f"throughput (side-effecting dispatches, one sidecar): {tp}")
    lines.append(f"sidecar RSS: idle {out['sidecar_rss_idle_mb']:.1f} MiB, under load "
                 f"{out['sidecar_rss_mb']:.1f} MiB; start-up to SERVING {out['startup_s']:.2f} s")
    extra = (f" (extrapolated from {out['reconcile_unbatched_sample_rows']} rows)"
             if out["reconcile_unbatched_extrapolated"] else "")
    lines.append(
        f"reconcile {out['reconcile_rows']} UNKNOWN Stripe rows at 20 searches/s "
        f"({out['reconcile_found']} found, {out['reconcile_not_executed']} never happened): "
        f"batched {out['reconcile_batched_s']:.1f} s / {out['reconcile_batched_requests']} "
        f"searches; one key per search {out['reconcile_unbatched_s']:.1f} s / "
        f"{out['reconcile_unbatched_requests']} searches{extra}")
    for name, error in out.get("peers_errors", {}).items():
        lines.append(f"peer {name} not measured: {error.splitlines()[-1] if error else ''}")
    return "\n".join(lines)
