"""Throughput: side-effecting dispatches per second through one sidecar with
1, 8 and 32 concurrent runs, and the sidecar's resident memory while it is loaded (part 4)."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from agentsaga.client import AsyncSagaClient
from agentsaga_lab.bench.overhead import run_id
from agentsaga_lab.bench.processes import Sidecar


@dataclass(frozen=True)
class Load:
    """`runs` concurrent runs, each dispatching `tool` with `args` over and over."""

    runs: int
    tool: str = "noop"
    args: dict[str, Any] = field(default_factory=lambda: {"n": 1})


@dataclass(frozen=True)
class Throughput:
    concurrency: int
    dispatches: int
    seconds: float

    @property
    def per_s(self) -> float:
        return self.dispatches / self.seconds


async def _load(address: str, load: Load, seconds: float) -> Throughput:
    client = AsyncSagaClient(address, timeout=60)
    try:
        runs = [run_id(f"tp{load.runs}") for _ in range(load.runs)]
        await asyncio.gather(*(client.begin_run(r) for r in runs))
        for r in runs:  # warm every run's path once
            await client.dispatch(r, "noop", {"n": 0})
        done = 0
        deadline = time.perf_counter() + seconds

        async def worker(rid: str) -> None:
            nonlocal done
            while time.perf_counter() < deadline:
                await client.dispatch(rid, load.tool, load.args)
                done += 1

        start = time.perf_counter()
        await asyncio.gather(*(worker(r) for r in runs))
        return Throughput(load.runs, done, time.perf_counter() - start)
    finally:
        await client.close()


def measure(sidecar: Sidecar, load: Load, seconds: float) -> tuple[Throughput, float]:
    """Dispatches/s under `load` for `seconds`, and the peak RSS (MiB) seen meanwhile."""
    peak = sidecar.rss_mb()
    stop = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not stop.wait(0.05):
            peak = max(peak, sidecar.rss_mb())

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        result = asyncio.run(_load(sidecar.address, load, seconds))
    finally:
        stop.set()
        sampler.join()
    return result, max(peak, sidecar.rss_mb())
