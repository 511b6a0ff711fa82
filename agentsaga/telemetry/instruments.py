"""The metrics. Names follow OTel conventions; in Prometheus (through the collector or the
scrape endpoint) dots become underscores, counters gain `_total` and units a suffix:
`agentsaga.dispatch.duration` (s) -> `agentsaga_dispatch_duration_seconds_bucket`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from opentelemetry import metrics

from agentsaga.states import (
    COMPENSATION_METRIC,
    RECONCILE_RESULT,
    CorrectionState,
    StepStatus,
)

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
    Metric("agentsaga.log.up", "gauge", "1",
           "1 when this process can query the saga log, 0 when it cannot"),
    Metric("agentsaga.step.open.age", "gauge", "s",
           "Per run and tool: age of the oldest step whose outcome is not known (INTENDED or "
           "UNKNOWN)"),
    Metric("agentsaga.human.wait.age", "gauge", "s",
           "Per run and kind: how long the oldest item has waited for a human (a proposed "
           "correction, a compensation that failed)"),
    Metric("agentsaga.pivot.awaiting.age", "gauge", "s",
           "Per run awaiting approval: how long its staged plan has waited"),
    Metric("agentsaga.pivot.authorisation.age", "gauge", "s",
           "Per run awaiting approval: age of the oldest card authorisation (manual capture, "
           "not captured) in its staged plan; card networks expire them after about 7 days"),
    Metric("agentsaga.run.orphaned.age", "gauge", "s",
           "Per orphaned run not unwound yet (operator): since the operator found it orphaned"),
    Metric("agentsaga.run.orphan.grace", "gauge", "s",
           "Per orphaned run not unwound yet (operator): its grace period"),
    Metric("agentsaga.operator.resync.age", "gauge", "s",
           "Per operator replica: the longest time since an AgentRun it handles was resynced "
           "(0 when it handles none, e.g. a standby peer)"),
)
METRIC = {m.name: m for m in METRICS}

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


# Counter series that must exist (at 0) before their first event: Prometheus's increase() and
# rate() see nothing in a series whose first sample already counts the event. (INTENDED is where
# a row starts, not an outcome.)
STEP_STATUSES = tuple(str(s) for s in StepStatus if s != StepStatus.INTENDED)
RECONCILE_RESULTS = tuple(dict.fromkeys(RECONCILE_RESULT.values()))
COMPENSATION_STATES = tuple(COMPENSATION_METRIC.values())
CORRECTION_STATES = tuple(str(s) for s in CorrectionState)
JOB_KINDS = ("reconcile", "unwind", "corrections")
JOB_OUTCOMES = ("settled", "unsettled", "failed")


def zero_tool_counters(instruments: Instruments, tools: Iterable[tuple[str, str]]) -> None:
    """Create the per-tool counter series at 0 for each logged (name, class) of a registry,
    and the series of the reconcile/unwind work a sidecar runs itself."""
    zero_job_counters(instruments, JOB_OUTCOMES)
    for tool, cls in tools:
        if cls == "pure":
            continue
        for status in STEP_STATUSES:
            instruments.step_outcomes.add(0, {"agentsaga.tool": tool, "agentsaga.status": status})
        for result in RECONCILE_RESULTS:
            instruments.reconcile_results.add(0, {"agentsaga.tool": tool,
                                                  "agentsaga.reconcile.result": result})
        if cls == "irreversible":
            instruments.irreversible.add(0, {"agentsaga.tool": tool})
        for state in COMPENSATION_STATES:
            instruments.compensations.add(0, {"agentsaga.tool": tool,
                                              "agentsaga.compensation.state": state})
        for state in CORRECTION_STATES:
            instruments.corrections.add(0, {"agentsaga.tool": tool,
                                            "agentsaga.correction.state": state})


def zero_job_counters(instruments: Instruments, outcomes: Iterable[str]) -> None:
    """The reconcile/unwind/corrections job series at 0 for these outcomes (the operator
    counts `started`; whoever runs the work counts settled, unsettled or failed)."""
    for kind in JOB_KINDS:
        for outcome in outcomes:
            instruments.jobs.add(0, {"agentsaga.job.kind": kind,
                                     "agentsaga.job.outcome": outcome})


def zero_operator_counters(instruments: Instruments) -> None:
    """The operator's counter series at 0: orphaned runs, Jobs started by kind."""
    instruments.orphaned.add(0)
    zero_job_counters(instruments, ("started",))
