"""The metrics. Names follow OTel conventions; in Prometheus (through the collector or the
scrape endpoint) dots become underscores, counters gain `_total` and units a suffix:
`agentsaga.dispatch.duration` (s) -> `agentsaga_dispatch_duration_seconds_bucket`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from opentelemetry import metrics

Kind = Literal["counter", "histogram", "gauge"]


@dataclass(frozen=True)
class Metric:
    name: str
    kind: Kind
    unit: str
    description: str


METRICS: tuple[Metric, ...] = (
    Metric("agentsaga.dispatch.duration", "histogram", "s",
           "Dispatch time by tool and outcome (log writes, reconcile and the real call)"),
    Metric("agentsaga.step.outcomes", "counter", "{step}",
           "Saga-log rows reaching a status: CONFIRMED, FAILED, UNKNOWN, NOT_EXECUTED, "
           "COMPENSATED"),
    Metric("agentsaga.steps.open", "gauge", "{step}",
           "Rows now INTENDED or UNKNOWN (outcome not known yet)"),
    Metric("agentsaga.reconcile.results", "counter", "{step}",
           "Reconcile by key: found, not_found, unknown"),
    Metric("agentsaga.compensations", "counter", "{compensation}",
           "Compensation progress: intended, sent (done), failed, queued (irreversible)"),
    Metric("agentsaga.corrections", "counter", "{correction}",
           "Corrections recorded by state (Proposed, Approved, Sent, Silent, Dismissed)"),
    Metric("agentsaga.irreversible_before_pivot", "counter", "{step}",
           "Irreversible calls run before the pivot (R10; should stay 0)"),
    Metric("agentsaga.run.irreversible_before_pivot", "histogram", "{step}",
           "Per ended run: its irreversible_before_pivot count"),
    Metric("agentsaga.pivot.wait", "histogram", "s",
           "From staging the plan to the human decision"),
    Metric("agentsaga.runs.orphaned", "counter", "{run}",
           "Runs the operator found orphaned (pod gone, run unfinished)"),
    Metric("agentsaga.jobs", "counter", "{job}",
           "Reconcile/unwind jobs by kind and outcome (started, settled, unsettled, failed)"),
)

DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
WAIT_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 900, 1800, 3600, 7200, 21600, 86400)


class Instruments:
    """The synchronous instruments, created once per Telemetry."""

    def __init__(self, meter: metrics.Meter) -> None:
        self.meter = meter
        self.dispatch_duration = meter.create_histogram(
            "agentsaga.dispatch.duration", unit="s", description=METRICS[0].description,
            explicit_bucket_boundaries_advisory=list(DURATION_BUCKETS))
        self.step_outcomes = meter.create_counter(
            "agentsaga.step.outcomes", unit="{step}", description=METRICS[1].description)
        self.reconcile_results = meter.create_counter(
            "agentsaga.reconcile.results", unit="{step}", description=METRICS[3].description)
        self.compensations = meter.create_counter(
            "agentsaga.compensations", unit="{compensation}", description=METRICS[4].description)
        self.corrections = meter.create_counter(
            "agentsaga.corrections", unit="{correction}", description=METRICS[5].description)
        self.irreversible = meter.create_counter(
            "agentsaga.irreversible_before_pivot", unit="{step}",
            description=METRICS[6].description)
        self.run_irreversible = meter.create_histogram(
            "agentsaga.run.irreversible_before_pivot", unit="{step}",
            description=METRICS[7].description,
            explicit_bucket_boundaries_advisory=[0, 1, 2, 5, 10])
        self.pivot_wait = meter.create_histogram(
            "agentsaga.pivot.wait", unit="s", description=METRICS[8].description,
            explicit_bucket_boundaries_advisory=list(WAIT_BUCKETS))
        self.orphaned = meter.create_counter(
            "agentsaga.runs.orphaned", unit="{run}", description=METRICS[9].description)
        self.jobs = meter.create_counter(
            "agentsaga.jobs", unit="{job}", description=METRICS[10].description)
