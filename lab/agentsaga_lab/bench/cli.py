"""`agentsaga bench`: every measurement in one run, side by side, as a table or JSON.

    agentsaga bench                 the full run (10,000-row reconcile: a few minutes)
    agentsaga bench --quick         under two minutes
    agentsaga bench --json          JSON instead of the table
    agentsaga bench --no-peers      skip DBOS, Temporal and Restate (reported as not measured)
    agentsaga bench --log-rows N    dispatch with N ended-run rows in the log vs an empty log
    agentsaga bench --operator-scale N --kube-url URL
                                    the operator idle at N AgentRuns (90% finished), and the
                                    time from a pod eviction to the Job under that load
    agentsaga bench --write-docs PAGE
                                    also write the run's figures as the documentation's
                                    Markdown page (docs/benchmarks/figures.md)
    agentsaga bench --from-json FILE --write-docs PAGE
                                    the page from a run saved with --json, measuring nothing
    agentsaga bench --compare BASELINE.json
                                    the regression gate: each figure's ratio to the floors of
                                    its own run against the baseline's; exit 1 when one grew
                                    beyond its tolerance (`make bench-check`, `gate`)

--write-docs refuses to measure on a machine whose 1-minute load exceeds its core count (other
work would be measured as ours) unless --loaded-ok; the load is watched during the run too, and
a page whose figures were taken under load says so at its top (`machine_load`).
Every process the bench starts (sidecars, peers' servers, the operator, its embedded Postgres)
is stopped before it exits.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentsaga_lab.bench import (
    figures_page,
    gate,
    isolation,
    log_scale,
    machine_load,
    mcp_overhead,
    operator_scale,
    outcome_commit,
    overhead,
    reconcile_scale,
    throughput,
    worker_pool,
)
from agentsaga_lab.bench.peers import PeerEnv
from agentsaga_lab.bench.processes import (
    NAMESPACE,
    BenchDatabase,
    Sidecar,
    bench_database,
    start_sidecar,
    tenant_env,
)
from agentsaga_lab.bench.stats import Sample

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
    parser.add_argument("--log-rows", type=int, help="rows of ended runs to fill a saga log "
                        "with, to time dispatch against it and an empty one (default 10000000, "
                        "quick 1000000; 0: skip)")
    parser.add_argument("--operator-scale", type=int, default=0, metavar="N",
                        help="AgentRuns (90%% finished) to idle the operator at (needs "
                        "--kube-url; default 0: skip)")
    parser.add_argument("--kube-url", help="a Kubernetes API server that serves the AgentRun "
                        "CRD without credentials: `kubectl proxy` in front of a throw-away "
                        "cluster (in a checkout: `make bench-operator-scale N=...` starts one); "
                        "the bench leaves its objects there")
    parser.add_argument("--operator-idle-seconds", type=float, help="how long the operator is "
                        "watched at idle, once its start-up is over; several resync intervals, "
                        "so that its steady work counts at its real rate (default 60, quick 30)")
    parser.add_argument("--write-docs", type=Path, metavar="PAGE", help="also write the run's "
                        "figures as a Markdown page (the documentation's is "
                        "docs/benchmarks/figures.md)")
    parser.add_argument("--from-json", type=Path, metavar="FILE", help="measure nothing: take "
                        "the results of a run saved with --json (for --write-docs, --compare)")
    parser.add_argument("--compare", type=Path, metavar="BASELINE", help="the regression gate: "
                        "compare each figure's ratio to the floors of this run with the same "
                        "ratio in BASELINE (a run saved with --json, e.g. bench/baseline.json); "
                        "exit 1 when one grew beyond its tolerance")
    parser.add_argument("--loaded-ok", action="store_true", help="with --write-docs: measure "
                        "even when the machine's load exceeds its core count; the page then "
                        "says that its figures are not representative")


def _defaults(args: argparse.Namespace) -> None:
    quick = args.quick
    args.calls = args.calls or (500 if quick else 2000)
    args.seconds = args.seconds or (2.0 if quick else 5.0)
    args.reconcile_rows = args.reconcile_rows or (1000 if quick else 10000)
    args.reconcile_sample = args.reconcile_sample or (100 if quick else 500)
    args.reconcile_sample = min(args.reconcile_sample, args.reconcile_rows)
    if args.log_rows is None:
        args.log_rows = 1_000_000 if quick else 10_000_000
    args.operator_idle_seconds = args.operator_idle_seconds or (30.0 if quick else 60.0)
    if args.operator_scale and not args.kube_url:
        raise SystemExit("agentsaga bench: --operator-scale needs --kube-url (an API server "
                         "serving the AgentRun CRD without credentials, e.g. `kubectl proxy` "
                         "in front of a throw-away cluster); in a checkout of agentsaga, `make "
                         "bench-operator-scale N=...` runs it against a throw-away control plane")
    if args.log_rows < 0 or args.operator_scale < 0:
        raise SystemExit("agentsaga bench: --log-rows and --operator-scale must not be negative")


def run(args: argparse.Namespace) -> int:
    saved = args.from_json
    baseline = _baseline(args.compare)
    if saved is None and args.write_docs is not None and not args.loaded_ok:
        _refuse_when_loaded()
    results = _run(args) if saved is None else json.loads(saved.read_text())
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print(render(results))
    if args.write_docs is not None:
        figures_page.write(args.write_docs, results, latency_rows(results),
                           summary_lines(results), ratio_rows(results))
    if baseline is None:
        return 0
    verdicts = gate.compare(baseline, results)
    print(gate.report(verdicts, str(args.compare)), file=sys.stderr if args.json else sys.stdout,
          flush=True)
    return 0 if gate.passed(verdicts) else 1


def _baseline(path: Path | None) -> dict[str, Any] | None:
    """The baseline's results, read before anything is measured (a bad path fails at once)."""
    if path is None:
        return None
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise SystemExit(f"agentsaga bench: --compare {path}: cannot read a run saved with "
                         f"--json there ({exc}); write one with `agentsaga bench --quick "
                         f"--json > {path}` on a quiet machine") from None
    if not isinstance(found, dict):
        raise SystemExit(f"agentsaga bench: --compare {path} holds no run's results (a JSON "
                         "object, as `agentsaga bench --json` prints)")
    return found


def _refuse_when_loaded() -> None:
    load, cpus = machine_load.load_now(), machine_load.cores()
    if machine_load.loaded(load, cpus):
        raise SystemExit(
            f"agentsaga bench: not writing the figures page from this machine: its 1-minute "
            f"load is {load:.1f} on {cpus} cores, so other work would be measured as ours. Run "
            "it again when the machine is quiet (`uptime`), or pass --loaded-ok to measure "
            "anyway: the page then says its figures are not representative.")


def _run(args: argparse.Namespace) -> dict[str, Any]:
    _defaults(args)
    for noisy in ("stripe", "httpx", "httpx2", "mcp", "pgserver"):  # a line per request otherwise
        logging.getLogger(noisy).setLevel(logging.WARNING)
    facts = figures_page.run_facts(sys.argv[2:] if sys.argv[1:2] == ["bench"] else sys.argv[1:])
    roots = {os.getpid()}  # the bench's own processes; its embedded Postgres joins them
    with machine_load.LoadWatch(lambda: set(roots)) as watch:
        results = measure(args, progress=lambda what: print(f"bench: {what}", file=sys.stderr,
                                                              flush=True), roots=roots)
    reading = watch.reading()
    facts.update(load_average=reading.start, load_most=reading.most,
                 others_load_most=reading.others_most, representative=reading.representative)
    if not reading.representative:
        print(f"bench: the machine was loaded (1-minute load {reading.start:.1f} at the start, "
              f"others' load up to {reading.others_most:.1f} during the run, on "
              f"{reading.cpus} cores): these figures are not representative", file=sys.stderr)
    return {**results, "run": facts}


def measure(args: argparse.Namespace, progress: Callable[[str], None],
            roots: set[int] | None = None) -> dict[str, Any]:
    progress("starting Postgres")
    database = bench_database(args.dsn)
    postmaster = machine_load.postmaster_pid(database.embedded_dir)
    if roots is not None and postmaster is not None:
        roots.add(postmaster)
    try:
        return _measure(args, database, progress)
    finally:  # the embedded server too: the bench leaves nothing running
        database.stop()


def _measure(args: argparse.Namespace, database: BenchDatabase,
             progress: Callable[[str], None]) -> dict[str, Any]:
    out: dict[str, Any] = {"calls": args.calls}
    dsn = database.dsn
    progress("starting the sidecar (start-up time)")
    starts: list[float] = []
    sidecar: Sidecar | None = None
    try:
        for _ in range(2 if args.quick else 3):
            if sidecar is not None:
                sidecar.stop()
            sidecar = start_sidecar(database.tenant_dsn, env=tenant_env())
            starts.append(sidecar.startup_s)
        assert sidecar is not None
        out["startup_s"] = statistics.median(starts)
        out["sidecar_rss_idle_mb"] = sidecar.rss_mb()
        _latencies(out, args.calls, database, sidecar, progress)
        progress("throughput through one sidecar")
        peak = out["sidecar_rss_idle_mb"]
        for level in CONCURRENCY:
            result, rss = throughput.measure(sidecar, throughput.Load(level), args.seconds)
            out[f"throughput_{level}_per_s"] = result.per_s
            peak = max(peak, rss)
        out["throughput_per_s"] = max(out[f"throughput_{c}_per_s"] for c in CONCURRENCY)
        out["sidecar_rss_mb"] = peak
    finally:
        if sidecar is not None:
            sidecar.stop()
    out.update(isolation.measure(database, calls=args.calls, seconds=args.seconds,
                                 runs=CONCURRENCY[-1], rounds=2 if args.quick else 3,
                                 progress=progress))
    out.update(outcome_commit.measure(dsn, args.calls, args.seconds, CONCURRENCY,
                                      1 if args.quick else 2, progress))
    out.update(worker_pool.measure(dsn, args.calls, args.seconds, CONCURRENCY[-1],
                                   2 if args.quick else 4, progress))
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
    _log_scale(out, args, database, progress)
    _operator_scale(out, args, database, progress)
    _ratios(out)
    return out


def _log_scale(out: dict[str, Any], args: argparse.Namespace, database: BenchDatabase,
               progress: Callable[[str], None]) -> None:
    out["log_rows"] = args.log_rows or None
    for key in ("dispatch_p50_empty_log_ms", "dispatch_p99_empty_log_ms",
                "dispatch_p50_full_log_ms", "dispatch_p99_full_log_ms", "log_fill_s",
                "full_vs_empty_log_p50"):
        out[key] = None
    if not args.log_rows:
        return
    name = f"agentsaga_bench_log_{os.getpid()}_{int(time.time())}"
    found = log_scale.measure(database.admin_dsn, args.log_rows, args.calls, progress, name)
    out.update(dispatch_p50_empty_log_ms=found.empty.p50, dispatch_p99_empty_log_ms=found.empty.p99,
               dispatch_p50_full_log_ms=found.full.p50, dispatch_p99_full_log_ms=found.full.p99,
               log_fill_s=found.fill_s, full_vs_empty_log_p50=found.full.p50 / found.empty.p50)


def _operator_scale(out: dict[str, Any], args: argparse.Namespace, database: BenchDatabase,
                    progress: Callable[[str], None]) -> None:
    out["operator_runs"] = args.operator_scale or None
    for key in ("operator_idle_api_rps", "operator_idle_sql_qps", "operator_rss_mb",
                "eviction_to_job_s", "operator_settle_s"):
        out[key] = None
    if not args.operator_scale:
        return
    try:
        found = operator_scale.measure(database.dsn, database.admin_dsn, args.kube_url,
                                       args.operator_scale, args.operator_idle_seconds, progress)
    except Exception as exc:  # reported with the reason, like a peer that cannot run
        reason = f"{type(exc).__name__}: {exc}"
        logger.warning("the operator at scale was not measured: %s", reason, exc_info=True)
        out["operator_error"] = reason[-500:]
        return
    out.update(operator_idle_api_rps=found.api_rps, operator_idle_sql_qps=found.sql_qps,
               operator_rss_mb=found.rss_mb, eviction_to_job_s=found.eviction_to_job_s,
               operator_settle_s=found.settle_s, operator_finished_runs=found.finished,
               operator_background_qps=found.background_qps,
               operator_idle_requests=found.requests,
               operator_idle_requests_per_10s=found.timeline)


def _put(out: dict[str, Any], name: str, sample: Sample) -> None:
    out[f"{name}_p50_ms"] = sample.p50
    out[f"{name}_p99_ms"] = sample.p99


def _latencies(out: dict[str, Any], calls: int, database: BenchDatabase, sidecar: Sidecar,
               progress: Callable[[str], None]) -> None:
    """The dispatch as a namespace's credential makes it (row-level security and the guarding
    triggers in force); the floors as the database's owner."""
    progress(f"latencies ({calls} calls each)")
    tenant = database.tenant_dsn
    _put(out, "direct", overhead.direct(calls))
    _put(out, "floor_commit", overhead.floor_commit(database.dsn, calls))
    _put(out, "floor_grpc", overhead.floor_grpc(sidecar.address, calls))
    _put(out, "inproc_dispatch", overhead.in_process(tenant, calls, async_outcomes=True,
                                                     namespace=NAMESPACE))
    _put(out, "inproc_sync_outcome", overhead.in_process(tenant, calls, async_outcomes=False,
                                                         namespace=NAMESPACE))
    _put(out, "sidecar_dispatch", overhead.through_sidecar(sidecar.address, calls))
    _put(out, "pure", overhead.through_sidecar(sidecar.address, calls, tool="pure_noop"))


PEERS: dict[str, tuple[str, tuple[str, ...], str]] = {
    # key: (driver, its arguments, what it measures)
    "dbos_step": ("dbos_step.py", (), "in-process step: a DBOS @DBOS.step in a workflow, "
                  "same Postgres"),
    "restate_inhandler_step": ("restate_step.py", ("inhandler",), "in-process step: a Restate "
                               "ctx.run inside the handler (server journal, HTTP/2)"),
    "restate_remote_step": ("restate_step.py", ("remote",), "remote step: one Restate ingress "
                            "call per step to a handler doing one ctx.run"),
    "temporal_durable_activity": ("temporal_activity.py", ("durable",), "remote step: one "
                                  "Temporal activity per step, durable store (--db-filename)"),
    "temporal_durable_1p_activity": ("temporal_activity.py", ("durable-1p",), "the same, task "
                                     "queues with one partition"),
}
"""The peers, each with what it is compared with: in-process steps with the in-process
dispatcher, remote steps (the agent in another process) with the sidecar."""


def _peers(out: dict[str, Any], args: argparse.Namespace, dsn: str,
           progress: Callable[[str], None]) -> None:
    for name in PEERS:
        out[f"{name}_p50_ms"] = out[f"{name}_p99_ms"] = out[f"{name}_phases_ms"] = None
    out["peers_measured"] = []
    out["peers_errors"] = {}
    out["peers_labels"] = {name: label for name, (_, _, label) in PEERS.items()}
    try:
        if args.no_peers:
            return
        env = PeerEnv(args.peers_dir.resolve())
        progress(f"installing the peers into {env.root} (first run only)")
        try:
            env.ensure()
        except Exception as exc:  # no registry, no npm: the peers are reported as not measured
            logger.warning("the peers could not be installed: %s", exc)
            out["peers_errors"] = {name: f"not installed: {exc}" for name in PEERS}
            return
        peer_calls = max(50, args.calls // 4)
        for name, (script, extra, _) in PEERS.items():
            progress(f"peer: {name} ({peer_calls} steps)")
            try:
                # each driver bounds itself (start-up 60 s + 1 s a step); this is the backstop
                found = env.run(script, dsn, str(peer_calls), *extra,
                                timeout=90.0 + peer_calls)
            except Exception as exc:  # a peer that cannot run is reported, not fatal
                logger.warning("peer %s not measured: %s", name, exc)
                out["peers_errors"][name] = str(exc)[-500:]
                continue
            _put(out, name, found.sample)
            out[f"{name}_phases_ms"] = found.phases_ms or None
            out["peers_measured"].append(name)
    finally:  # the names of the first round, kept for existing readers of the JSON
        out["temporal_activity_ms"] = out["temporal_durable_activity_p50_ms"]
        out["restate_step_ms"] = out["restate_inhandler_step_p50_ms"]


def _ratios(out: dict[str, Any]) -> None:
    side = out["sidecar_dispatch_p50_ms"]
    inproc = out["inproc_dispatch_p50_ms"]
    out["sidecar_overhead_p50_ms"] = side - out["direct_p50_ms"]
    out["sidecar_overhead_p99_ms"] = out["sidecar_dispatch_p99_ms"] - out["direct_p99_ms"]
    out["sidecar_vs_floor_commit"] = side / out["floor_commit_p50_ms"]
    out["sidecar_vs_floors"] = side / (out["floor_commit_p50_ms"] + out["floor_grpc_p50_ms"])
    out["sidecar_vs_inproc"] = side / inproc
    out["inproc_vs_floor_commit"] = inproc / out["floor_commit_p50_ms"]
    out["pure_vs_floor_grpc"] = out["pure_p50_ms"] / out["floor_grpc_p50_ms"]
    out["throughput_32_vs_floor_commit"] = (
        (1000.0 / out["throughput_32_per_s"]) / out["floor_commit_p50_ms"])
    out["mcp_sidecar_vs_direct"] = out["mcp_sidecar_p50_ms"] / out["mcp_direct_p50_ms"]
    out["sync_vs_async_outcome"] = (out["inproc_sync_outcome_p50_ms"] / inproc)
    out["mcp_overhead_p50_ms"] = out["mcp_sidecar_p50_ms"] - out["mcp_direct_p50_ms"]
    out["mcp_overhead_p99_ms"] = out["mcp_sidecar_p99_ms"] - out["mcp_direct_p99_ms"]
    for peer in PEERS:
        value = out.get(f"{peer}_p50_ms")
        base = inproc if "inhandler" in peer or peer == "dbos_step" else side
        out[f"{peer}_vs_ours"] = None if not value else value / base


def _ms(value: Any) -> str:
    return "not measured" if value is None else f"{value:.3f}"


def latency_rows(out: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """The latency table's rows: label, p50 (ms), p99 (ms), note."""
    rows: list[tuple[str, str, str, str]] = []

    def lat(label: str, key: str, note: str = "") -> None:
        rows.append((label, _ms(out.get(f"{key}_p50_ms")), _ms(out.get(f"{key}_p99_ms")), note))

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
    for peer in PEERS:
        ours = "in-process" if "inhandler" in peer or peer == "dbos_step" else "the sidecar"
        ratio = out.get(f"{peer}_vs_ours")
        lat(f"peer: {peer}", peer, "" if ratio is None else f"{ratio:.1f}x {ours}")
    return rows


def _times(value: Any) -> str:
    return "not measured" if value is None else f"{value:.2f}x"


def _quotient(out: dict[str, Any], key: str, *under: str) -> float | None:
    """out[key] over the sum of out[under...]; None when any is missing."""
    values = [float(v) for k in (key, *under)
              if isinstance(v := out.get(k), (int, float)) and v > 0]
    if len(values) != 1 + len(under):
        return None
    return values[0] / sum(values[1:])


def ratio_rows(out: dict[str, Any]) -> list[tuple[str, str, str]]:
    """The ratios, shown before any absolute figure: each figure to the floors measured in the
    same run, isolation's cost, then each peer to ours (above 1: the peer is slower). Rows:
    what, ratio, to what. Computed from the run's figures, so a run saved before a ratio was
    recorded shows it too."""
    per_s = out.get("throughput_32_per_s")
    floor = out.get("floor_commit_p50_ms")
    per_dispatch = (1000.0 / per_s / floor if isinstance(per_s, (int, float)) and per_s > 0
                    and isinstance(floor, (int, float)) and floor > 0 else None)
    rows = [
        ("in-process dispatch p50",
         _times(_quotient(out, "inproc_dispatch_p50_ms", "floor_commit_p50_ms")),
         "the durable INSERT+COMMIT floor"),
        ("sidecar dispatch p50", _times(_quotient(out, "sidecar_dispatch_p50_ms",
                                                  "floor_commit_p50_ms", "floor_grpc_p50_ms")),
         "the commit floor + the gRPC round-trip floor"),
        ("sidecar, a pure tool p50", _times(_quotient(out, "pure_p50_ms", "floor_grpc_p50_ms")),
         "the gRPC round-trip floor"),
        ("time per dispatch at 32 runs", _times(per_dispatch), "the commit floor"),
        ("upstream MCP tool via the sidecar p50",
         _times(_quotient(out, "mcp_sidecar_p50_ms", "mcp_direct_p50_ms")),
         "the same tool called directly"),
        ("isolation: dispatch p50 with the row checks", _times(out.get("isolation_cost_p50")),
         "the same statements without them"),
        ("isolation: dispatch p99 with the row checks", _times(out.get("isolation_cost_p99")),
         "the same statements without them"),
        ("isolation: throughput at 32 runs without the row checks",
         _times(out.get("isolation_cost_throughput")), "with them"),
    ]
    for peer in PEERS:
        ours = ("our in-process dispatch" if "inhandler" in peer or peer == "dbos_step"
                else "our sidecar dispatch")
        rows.append((f"peer: {peer} p50", _times(out.get(f"{peer}_vs_ours")), ours))
    return rows


def render(out: dict[str, Any]) -> str:
    """The tables printed by `agentsaga bench`: the ratios, then the latencies."""
    ratios = ratio_rows(out)
    rwidth = max(len(r[0]) for r in ratios)
    lines = [f"{'ratio':<{rwidth}}  {'':>12}  to", f"{'-' * rwidth}  {'-' * 12}  --"]
    lines += [f"{a:<{rwidth}}  {b:>12}  {c}" for a, b, c in ratios]
    rows = latency_rows(out)
    width = max(len(r[0]) for r in rows)
    lines += ["", f"{'latency (ms)':<{width}}  {'p50':>12}  {'p99':>12}  note",
              f"{'-' * width}  {'-' * 12}  {'-' * 12}  ----"]
    lines += [f"{a:<{width}}  {b:>12}  {c:>12}  {d}" for a, b, c, d in rows]
    return "\n".join([*lines, "", *summary_lines(out)])


def summary_lines(out: dict[str, Any]) -> list[str]:
    """What follows the latency table: throughput, memory, reconcile, the log, the operator,
    the peers."""
    lines: list[str] = []
    tp = ", ".join(f"{c} runs {out[f'throughput_{c}_per_s']:.0f}/s" for c in CONCURRENCY)
    lines.append(f"throughput (side-effecting dispatches, one sidecar): {tp}")
    lines.append(
        "outcome commit, side by side: sequential p50/p99 async "
        f"{out['sidecar_dispatch_async_p50_ms']:.3f}/{out['sidecar_dispatch_async_p99_ms']:.3f}"
        f" ms, group {out['sidecar_dispatch_group_p50_ms']:.3f}/"
        f"{out['sidecar_dispatch_group_p99_ms']:.3f} ms; throughput async/group "
        + ", ".join(f"{c} runs {out[f'throughput_{c}_runs_async']:.0f}/"
                    f"{out[f'throughput_{c}_runs_group']:.0f}/s" for c in CONCURRENCY)
        + f" (group {out['group_vs_async_throughput_32']:.2f}x async at 32 runs)")
    runs = CONCURRENCY[-1]
    lines.append(
        f"worker threads, side by side: {out['hot_workers']:.0f} hot (the default) against all "
        f"{out['workers']:.0f}: {runs} runs {out[f'throughput_{runs}_runs_hot']:.0f}/"
        f"{out[f'throughput_{runs}_runs_all']:.0f}/s "
        f"({out[f'hot_vs_all_throughput_{runs}']:.2f}x), with a tool waiting "
        f"{worker_pool.SLOW_TOOL_MS} ms {out[f'slow_throughput_{runs}_runs_hot']:.0f}/"
        f"{out[f'slow_throughput_{runs}_runs_all']:.0f}/s "
        f"({out[f'hot_vs_all_slow_throughput_{runs}']:.2f}x); sequential p50 "
        f"{out['sidecar_dispatch_hot_p50_ms']:.3f}/{out['sidecar_dispatch_all_p50_ms']:.3f} ms")
    if out.get("isolation_cost_p50") is not None:
        lines.append(
            "isolation's cost, side by side (the namespace credential with row-level security "
            "and the guarding triggers, against the same statements on a twin database without "
            "them): in-process p50/p99 "
            f"{out['isolation_isolated_p50_ms']:.3f}/{out['isolation_isolated_p99_ms']:.3f} ms "
            f"against {out['isolation_unchecked_p50_ms']:.3f}/"
            f"{out['isolation_unchecked_p99_ms']:.3f} ms ({out['isolation_cost_p50']:.2f}x/"
            f"{out['isolation_cost_p99']:.2f}x); {out['isolation_runs']} runs through a sidecar "
            f"{out['isolation_isolated_per_s']:.0f}/s against "
            f"{out['isolation_unchecked_per_s']:.0f}/s ({out['isolation_cost_throughput']:.2f}x)")
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
    if out.get("log_rows"):
        lines.append(
            f"dispatch with {out['log_rows']} ended-run rows in the log: p50 "
            f"{out['dispatch_p50_full_log_ms']:.3f} / p99 {out['dispatch_p99_full_log_ms']:.3f} ms"
            f" vs an empty log p50 {out['dispatch_p50_empty_log_ms']:.3f} / p99 "
            f"{out['dispatch_p99_empty_log_ms']:.3f} ms ({out['full_vs_empty_log_p50']:.2f}x;"
            f" filled in {out['log_fill_s']:.0f} s)")
    if "operator_error" in out:
        lines.append(f"operator at scale not measured: {out['operator_error']}")
    elif out.get("operator_runs"):
        lines.append(
            f"operator at {out['operator_runs']} AgentRuns ({out['operator_finished_runs']} "
            f"finished), idle: {out['operator_idle_api_rps']:.2f} API requests/s, "
            f"{out['operator_idle_sql_qps']:.2f} SQL queries/s, RSS {out['operator_rss_mb']:.0f}"
            f" MiB; eviction to Job {out['eviction_to_job_s']:.2f} s (started up in "
            f"{out['operator_settle_s']:.0f} s)")
        lines.extend(f"  idle requests: {count} {kind}"
                     for kind, count in (out.get("operator_idle_requests") or {}).items())
    for name, label in out.get("peers_labels", {}).items():
        lines.append(f"peer {name}: {label}")
        phases = out.get(f"{name}_phases_ms") or {}
        lines.extend(f"  {pair}: {ms:.2f} ms (median)" for pair, ms in phases.items())
    for name, error in out.get("peers_errors", {}).items():
        lines.append(f"peer {name} not measured: {error.splitlines()[-1] if error else ''}")
    return lines
