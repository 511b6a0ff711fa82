"""Reconcile at scale: N UNKNOWN Stripe rows settled against the local world
with its 20 requests/s search limit, batched (10 keys per search, OR clauses) versus one key per
search. The unbatched path is measured on a sample and extrapolated to N (it says so)."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from agentsaga.connectors.config import HttpSettings, StripeConfig
from agentsaga.connectors.stripe import StripeConnector
from agentsaga.keys import step_key
from agentsaga.saga.reconcile import Reconciler
from agentsaga.saga.registry import Compensation, Registry
from agentsaga.store import SagaLog, Step
from agentsaga.store.provisioning import copy_unknown_steps
from agentsaga_lab.world import World

SEARCH = "GET /v1/payment_intents/search"
TOOL = "charge_card"


@dataclass(frozen=True)
class ReconcileResult:
    rows: int
    batched_s: float
    batched_requests: int
    sample_rows: int
    sample_s: float
    sample_requests: int
    found: int
    not_executed: int

    @property
    def unbatched_s(self) -> float:
        """One key per search, extrapolated from the sample to `rows`."""
        return self.sample_s * self.rows / self.sample_rows

    @property
    def unbatched_requests(self) -> int:
        return round(self.sample_requests * self.rows / self.sample_rows)


def _registry(connector: StripeConnector, batched: bool) -> Registry:
    registry = Registry()
    registry.register(connector.charge_card, name=TOOL, cls="compensatable",
                      compensate=lambda args, key: Compensation(
                          "cancel_or_refund_payment", {"charge_key": key}),
                      lookup=connector.find,
                      lookup_many=connector.find_many if batched else None)
    return registry


def _seed_rows(dsn: str, prefix: str, count: int) -> list[str]:
    """`count` runs, each with one UNKNOWN charge_card step (as after a region outage)."""
    runs = [f"{prefix}-{i}" for i in range(count)]
    copy_unknown_steps(dsn, runs, tool=TOOL, tool_class="compensatable",
                       key=lambda r: step_key(r, 0, TOOL),
                       args_json='{"customer_id": "cus_bench", "amount": 100}',
                       error="timeout after the request was sent")
    return runs


def _seed_world(connector: StripeConnector, runs: list[str], missing_every: int) -> int:
    """Charge the cards of all runs but every `missing_every`-th (those never happened)."""
    todo = [r for i, r in enumerate(runs) if not (missing_every and i % missing_every == 0)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda r: connector.charge_card("cus_bench", 100, step_key(r, 0, TOOL)),
                      todo))
    return len(todo)


def _steps(saga_log: SagaLog, prefix: str) -> list[Step]:
    return [s for s in saga_log.unsettled() if s.run_id.startswith(prefix + "-")]


def measure(dsn: str, rows: int, sample: int, *, missing_every: int = 50,
            recheck_pause_s: float = 2.0, search_rate: float = 20.0) -> ReconcileResult:
    world = World(search_lag=0.0, search_rate=search_rate).start()
    saga_log = SagaLog(dsn).open(migrate=False)
    try:
        connector = StripeConnector(StripeConfig("sk_test_bench", api_base=world.url),
                                    HttpSettings(search_rate=search_rate))
        batched_runs = _seed_rows(dsn, "rb", rows)
        sample_runs = _seed_rows(dsn, "ru", sample)
        _seed_world(connector, batched_runs + sample_runs, missing_every)

        batched = Reconciler(saga_log, _registry(connector, True), recheck_pause_s)
        steps = _steps(saga_log, "rb")
        before = world.calls[SEARCH]
        start = time.perf_counter()
        outcomes = batched.settle_many(steps, {s.run_id: 1 for s in steps})
        batched_s = time.perf_counter() - start
        batched_requests = world.calls[SEARCH] - before

        single = Reconciler(saga_log, _registry(connector, False), recheck_pause_s)
        before = world.calls[SEARCH]
        start = time.perf_counter()
        for step in _steps(saga_log, "ru"):
            single.settle(step, 1)
        sample_s = time.perf_counter() - start
        sample_requests = world.calls[SEARCH] - before
        found = sum(o.step.status == "CONFIRMED" for o in outcomes)
        missing = sum(o.step.status == "NOT_EXECUTED" for o in outcomes)
        if found + missing != rows:
            raise RuntimeError(f"reconcile left {rows - found - missing} of {rows} rows unsettled")
        return ReconcileResult(rows, batched_s, batched_requests, sample, sample_s,
                               sample_requests, found, missing)
    finally:
        saga_log.close()
        world.stop()
