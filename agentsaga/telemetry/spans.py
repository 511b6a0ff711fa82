"""Spans and metrics of the saga, recorded around typed calls, never by reading positional
arguments:

    TracingInterceptor       the service's dispatch     span `execute_tool {tool}` (GenAI
                             and end_run                conventions); duration histogram;
                                                        irreversible_before_pivot per ended run
    TelemetryHooks           the store's hooks          step.outcomes, compensations and
                                                        corrections counters; span events;
                                                        reconcile results
    reconcile_span           Reconciler                 span `reconcile {tool}` (one row) or
                                                        `reconcile` (many)
    lookup_span              Reconciler                 span `reconcile lookup` (attempt 2 is
                                                        the re-check)
    compensation_span        unwind                     span `compensate {tool}`
    pivot_stage_span, pivot_decision_span               spans; pivot wait histogram
    job_span(kind)           the reconcile/unwind Jobs  span `agentsaga {kind}` in the run's trace

The outbound HTTP call of a connector is a child span of whichever of these is current
(httpx instrumentation, installed by `install`).
"""

from __future__ import annotations

import contextvars
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, Protocol

from opentelemetry import trace
from opentelemetry.trace import Link, Span, Status, StatusCode

from agentsaga.calls import DispatchCall, DispatchResult, EndRunCall, Interceptor
from agentsaga.states import (
    COMPENSATION_METRIC,
    RECONCILE_RESULT,
    CompensationStatus,
    DispatchOutcome,
    StepStatus,
)
from agentsaga.telemetry import payloads
from agentsaga.telemetry.core import context_from_carrier, current, run_context

if TYPE_CHECKING:  # the agent's client imports telemetry: no database driver for it
    from agentsaga.store import Correction, PivotRecord, Run, Step
    from agentsaga.store.interfaces import Reads

# what happened inside the innermost reconcile / compensate span of this thread
_phase: contextvars.ContextVar[Counter[str] | None] = contextvars.ContextVar(
    "agentsaga_telemetry_phase", default=None)


def _fail(span: Span, exc: BaseException) -> None:
    span.set_status(Status(StatusCode.ERROR, payloads.text(f"{type(exc).__name__}: {exc}")))
    span.set_attribute("error.type", type(exc).__qualname__)


@contextmanager
def _span(name: str, attributes: Mapping[str, Any], *, parent: Any = None,
          links: list[Link] | None = None) -> Iterator[tuple[Span, Counter[str]]]:
    """A span whose exceptions are recorded redacted (never the raw message), and a phase."""
    tracer = current().tracer
    with tracer.start_as_current_span(name, context=parent, attributes=dict(attributes),
                                      links=links, record_exception=False,
                                      set_status_on_exception=False) as span:
        phase: Counter[str] = Counter()
        token = _phase.set(phase)
        try:
            yield span, phase
        except BaseException as exc:
            _fail(span, exc)
            raise
        finally:
            _phase.reset(token)


def _step_attrs(step: Step) -> dict[str, Any]:
    return {"agentsaga.run_id": step.run_id, "agentsaga.step": step.step_idx,
            "agentsaga.key": step.idempotency_key, "agentsaga.tool": step.tool,
            "agentsaga.tool.class": step.tool_class}


# -- the service -------------------------------------------------------------------------------


class TracingInterceptor(Interceptor):
    """The service's dispatch as a span `execute_tool {tool}` with its duration measured, and
    each ended run's irreversible_before_pivot count."""

    def dispatch(self, call: DispatchCall,
                 proceed: Callable[[DispatchCall], DispatchResult]) -> DispatchResult:
        t = current()
        if t.quiet:  # no span, no attributes, no measurement: nothing would take them
            return proceed(call)
        attrs: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": call.tool,
            "gen_ai.tool.type": "function", "agentsaga.run_id": call.run_id,
            "agentsaga.tool": call.tool, "agentsaga.tool.class": call.tool_class}
        if t.record_payloads:
            attrs["gen_ai.tool.call.arguments"] = t.payload(call.args)
        started = time.perf_counter()
        outcome = "ERROR"
        try:
            with _span(f"execute_tool {call.tool}", attrs) as (span, _):
                out = proceed(call)
                outcome = str(out.outcome)
                span.set_attributes({
                    "gen_ai.tool.call.id": out.key, "agentsaga.key": out.key,
                    "agentsaga.step": out.step_idx, "agentsaga.outcome": outcome,
                    "agentsaga.status": out.status,
                    "agentsaga.external_ref": out.external_ref or ""})
                if out.outcome in (DispatchOutcome.FAILED, DispatchOutcome.UNKNOWN):
                    span.set_status(Status(StatusCode.ERROR, payloads.text(out.message)))
                    span.set_attribute("error.type", outcome)
                if t.record_payloads and out.result is not None:
                    span.set_attribute("gen_ai.tool.call.result", t.payload(out.result))
                return out
        finally:
            t.instruments.dispatch_duration.record(
                time.perf_counter() - started,
                {"agentsaga.tool": call.tool, "agentsaga.tool.class": call.tool_class,
                 "agentsaga.outcome": outcome})

    def end_run(self, call: EndRunCall, proceed: Callable[[EndRunCall], Run]) -> Run:
        run = proceed(call)
        current().instruments.run_irreversible.record(
            run.irreversible_before_pivot, {"agentsaga.run.state": str(run.state)})
        return run


def irreversible_before_pivot(tool: str) -> None:
    """R10 under the `count` policy: an irreversible call runs before the pivot."""
    current().instruments.irreversible.add(1, {"agentsaga.tool": tool})
    trace.get_current_span().set_attribute("agentsaga.irreversible_before_pivot", True)


# -- the store's writes ------------------------------------------------------------------------


class TelemetryHooks:
    """The store's hooks (`agentsaga.store.StoreHooks`): counters and span events for every
    outcome, compensation and correction the log records."""

    def on_outcome(self, step: Step) -> None:
        ins = current().instruments
        ins.step_outcomes.add(1, {"agentsaga.tool": step.tool,
                                  "agentsaga.status": str(step.status)})
        trace.get_current_span().add_event("agentsaga.step.status", {
            "agentsaga.step": step.step_idx, "agentsaga.key": step.idempotency_key,
            "agentsaga.status": str(step.status)})
        phase = _phase.get()
        if phase is not None and phase["reconcile"]:
            result = RECONCILE_RESULT.get(step.status, step.status.lower())
            phase[result] += 1
            ins.reconcile_results.add(1, {"agentsaga.tool": step.tool,
                                          "agentsaga.reconcile.result": result})

    def on_compensation(self, step: Step, status: CompensationStatus,
                        compensated: bool) -> None:
        state = COMPENSATION_METRIC[status]
        ins = current().instruments
        ins.compensations.add(1, {"agentsaga.tool": step.tool,
                                  "agentsaga.compensation.state": state})
        if compensated and step.status == StepStatus.COMPENSATED:
            ins.step_outcomes.add(1, {"agentsaga.tool": step.tool,
                                      "agentsaga.status": str(StepStatus.COMPENSATED)})
        trace.get_current_span().set_attribute("agentsaga.compensation.state", state)
        phase = _phase.get()
        if phase is not None:
            phase["comp:" + state] += 1

    def on_correction(self, correction: Correction) -> None:
        """A correction changed state: queued (Proposed/Silent), Approved, Dismissed or Sent."""
        current().instruments.corrections.add(1, {
            "agentsaga.tool": correction.tool,
            "agentsaga.correction.state": str(correction.state)})
        trace.get_current_span().add_event("agentsaga.correction", {
            "agentsaga.step": correction.step_idx,
            "agentsaga.correction.state": str(correction.state),
            "agentsaga.audience": correction.audience})


# -- reconcile and compensate ------------------------------------------------------------------


class _Finding(Protocol):
    """What reconcile found for one row (`agentsaga.saga.reconcile.Reconciled`)."""

    @property
    def step(self) -> Step: ...

    @property
    def finding(self) -> str: ...


class ReconcileSpan:
    def __init__(self, span: Span, phase: Counter[str]) -> None:
        self.span, self.phase = span, phase

    def found(self, reconciled: _Finding) -> None:
        """One row's finding."""
        self.span.set_attributes({
            "agentsaga.reconcile.finding": str(reconciled.finding),
            "agentsaga.reconcile.rechecked": reconciled.finding in ("found_on_recheck",
                                                                    "not_found"),
            "agentsaga.status": str(reconciled.step.status)})


@contextmanager
def reconcile_span(*, step: Step | None = None, keys: int | None = None,
                   run_id: str | None = None) -> Iterator[ReconcileSpan]:
    """R7 of one row (`step`), of `keys` rows of many runs, or of a run's rows (`run_id`)."""
    if step is not None:
        name, attrs = f"reconcile {step.tool}", _step_attrs(step)
    elif run_id is not None:
        name, attrs = "reconcile", {"agentsaga.run_id": run_id}
    else:
        name, attrs = "reconcile", {"agentsaga.reconcile.keys": keys or 0}
    with _span(name, attrs) as (span, phase):
        phase["reconcile"] = 1
        yield ReconcileSpan(span, phase)
        if step is None:
            span.set_attribute("agentsaga.reconcile.rechecked", phase["lookups"] > 1)
        for key in ("found", "not_found", "unknown"):
            span.set_attribute(f"agentsaga.reconcile.{key}", phase[key])


class LookupSpan:
    def __init__(self, span: Span) -> None:
        self.span = span

    def found(self, count: int) -> None:
        self.span.set_attribute("agentsaga.reconcile.found", count)


@contextmanager
def lookup_span(keys: int, attempt: int) -> Iterator[LookupSpan]:
    """One round of lookups by key (attempt 2 is the re-check after the pause)."""
    phase = _phase.get()
    if phase is not None:
        phase["lookups"] += 1
    with _span("reconcile lookup", {"agentsaga.reconcile.keys": keys,
                                    "agentsaga.reconcile.attempt": attempt,
                                    "agentsaga.reconcile.recheck": attempt > 1}) as (span, _):
        yield LookupSpan(span)


@contextmanager
def compensation_span(step: Step) -> Iterator[Span]:
    """R8: one step's compensation call and its log writes."""
    comp = step.compensation or {}
    attrs = {**_step_attrs(step), "gen_ai.operation.name": "execute_tool",
             "gen_ai.tool.name": str(comp.get("tool", "")),
             "agentsaga.compensation.of": step.tool}
    with _span(f"compensate {step.tool}", attrs) as (span, phase):
        yield span
        if phase["comp:sent"]:
            outcome = "COMPENSATED"
        elif phase["comp:failed"]:
            outcome = "FAILED"
        else:
            outcome = "UNKNOWN"
        span.set_attribute("agentsaga.outcome", outcome)
        if outcome != "COMPENSATED":
            span.set_status(Status(StatusCode.ERROR, f"compensation {outcome.lower()}"))


# -- pivot -------------------------------------------------------------------------------------


class PivotSpan:
    def __init__(self, span: Span) -> None:
        self.span = span

    def staged(self, record: PivotRecord) -> None:
        self.span.set_attributes({
            "agentsaga.pivot.plan_hash": record.plan_hash,
            "agentsaga.pivot.staged": len(record.staged),
            "agentsaga.pivot.commit": len(record.commit),
            "agentsaga.irreversible_before_pivot": record.irreversible_before_pivot})

    def decided(self, record: PivotRecord) -> None:
        self.span.set_attribute("agentsaga.pivot.decision", record.decision)
        waited = _seconds_between(record.staged_at, record.decided_at)
        if waited is not None:
            self.span.set_attribute("agentsaga.pivot.wait_s", waited)
            current().instruments.pivot_wait.record(
                waited, {"agentsaga.pivot.decision": record.decision})


@contextmanager
def pivot_stage_span(run_id: str) -> Iterator[PivotSpan]:
    with _span("pivot stage", {"agentsaga.run_id": run_id}) as (span, _):
        yield PivotSpan(span)


@contextmanager
def pivot_decision_span(saga_log: Reads, run_id: str, plan_hash: str) -> Iterator[PivotSpan]:
    parent, links = _parent(saga_log, run_id)
    attrs = {"agentsaga.run_id": run_id, "agentsaga.pivot.plan_hash": plan_hash}
    with _span("pivot decision", attrs, parent=parent, links=links) as (span, _):
        yield PivotSpan(span)


def _seconds_between(start: str, end: str) -> float | None:
    try:
        first = datetime.fromisoformat(start.replace("Z", "+00:00"))
        last = datetime.fromisoformat(end.replace("Z", "+00:00"))
    except ValueError:
        return None
    return max(0.0, (last - first).total_seconds())


# -- jobs and the operator ---------------------------------------------------------------------


def _parent(saga_log: Reads, run_id: str) -> tuple[Any, list[Link] | None]:
    """Inside a traced call (an RPC): stay in it, linked to the run. Else (a Job hours later):
    continue the run's own trace from the context stored at BeginRun."""
    stored = run_context(saga_log, run_id)
    if stored is None:
        return None, None
    run_span = trace.get_current_span(stored).get_span_context()
    if trace.get_current_span().get_span_context().is_valid:
        return None, [Link(run_span)]
    return stored, None


class JobSpan:
    def __init__(self, span: Span) -> None:
        self.span = span
        self.outcome = "failed"

    def settled(self, settled: bool) -> None:
        self.outcome = "settled" if settled else "unsettled"
        self.span.set_attribute("agentsaga.job.outcome", self.outcome)


@contextmanager
def job_span(kind: Literal["reconcile", "unwind"], saga_log: Reads,
             run_id: str) -> Iterator[JobSpan]:
    """A reconcile/unwind of a run: span `agentsaga {kind}` in the run's trace, counted by
    outcome (settled, unsettled, failed when it raised)."""
    parent, links = _parent(saga_log, run_id)
    attrs = {"agentsaga.run_id": run_id, "agentsaga.job.kind": kind}
    job: JobSpan | None = None
    try:
        with _span(f"agentsaga {kind}", attrs, parent=parent, links=links) as (span, _):
            job = JobSpan(span)
            yield job
    finally:
        job_outcome(kind, "failed" if job is None else job.outcome)


def job_outcome(kind: str, outcome: str) -> None:
    """Count a reconcile/unwind job: started (by the operator), settled, unsettled, failed."""
    current().instruments.jobs.add(1, {"agentsaga.job.kind": kind,
                                       "agentsaga.job.outcome": outcome})


@contextmanager
def operator_span(action: Literal["orphan", "job_start"], run_id: str,
                  trace_context: Mapping[str, Any] | None, *,
                  attributes: Mapping[str, Any] | None = None,
                  job_kind: str = "") -> Iterator[Span]:
    """An operator action on a run, in the run's trace (from the AgentRun annotation or the
    log): `orphan` counts an orphaned run, `job_start` a started Job of `job_kind`."""
    parent = context_from_carrier(trace_context)
    attrs = {"agentsaga.run_id": run_id, **(attributes or {})}
    if job_kind:
        attrs["agentsaga.job.kind"] = job_kind
    name = "operator orphan" if action == "orphan" else f"operator start job {job_kind}".strip()
    with _span(name, attrs, parent=parent) as (span, _):
        yield span
    if action == "orphan":
        current().instruments.orphaned.add(1)
    else:
        job_outcome(job_kind, "started")

