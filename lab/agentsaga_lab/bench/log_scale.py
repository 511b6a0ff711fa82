"""A log that stays fast: sidecar dispatch p50/p99 against a saga log holding N rows
of ended runs (`provisioning.fill_ended_runs`) and against an empty one, side by side: two
databases on the same server, a sidecar on each, timed in alternating rounds so that the
machine's drift falls on both. Every statement of a dispatch is per run (primary keys and the
partial unsettled index), so the two should be within noise of each other."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from agentsaga.client import SagaClient
from agentsaga.store.provisioning import create_database, fill_ended_runs
from agentsaga_lab.bench.overhead import run_id
from agentsaga_lab.bench.processes import start_sidecar
from agentsaga_lab.bench.stats import Sample

ROUNDS = 10


@dataclass(frozen=True)
class LogScale:
    rows: int
    empty: Sample
    full: Sample
    fill_s: float


def measure(admin_dsn: str, rows: int, calls: int, progress: Callable[[str], None],
            name: str) -> LogScale:
    empty_dsn = create_database(admin_dsn, f"{name}_empty")
    full_dsn = create_database(admin_dsn, f"{name}_full")
    progress(f"log scale: filling a log with {rows} rows of ended runs")
    start = time.perf_counter()
    fill_ended_runs(full_dsn, rows)
    fill_s = time.perf_counter() - start
    sidecars = [start_sidecar(empty_dsn), start_sidecar(full_dsn)]
    clients = [SagaClient(s.address, timeout=30) for s in sidecars]
    try:
        progress(f"log scale: {calls} dispatches each, empty and full log in alternating rounds")
        runs = [run_id("log-empty"), run_id("log-full")]
        for client, rid in zip(clients, runs, strict=True):
            client.begin_run(rid)
            for _ in range(50):  # warm-up
                client.dispatch(rid, "noop", {"n": 0})
        latencies: list[list[float]] = [[], []]
        per_round = max(1, calls // ROUNDS)
        for _ in range(ROUNDS):
            for which, (client, rid) in enumerate(zip(clients, runs, strict=True)):
                for i in range(per_round):
                    began = time.perf_counter()
                    client.dispatch(rid, "noop", {"n": i})
                    latencies[which].append((time.perf_counter() - began) * 1000.0)
    finally:
        for client in clients:
            client.close()
        for sidecar in sidecars:
            sidecar.stop()
    return LogScale(rows, Sample.of(latencies[0]), Sample.of(latencies[1]), fill_s)
