"""Spans and metrics, recorded by decorators on the saga's own functions.

    dispatch_traced          Dispatcher.dispatch        span `execute_tool {tool}` (GenAI
                                                        conventions); duration histogram
    outcome_recorded         SagaLog.record_outcome     step.outcomes counter; an event on the
                                                        current span; reconcile results
    compensation_recorded    SagaLog.record_compensation  compensations counter, COMPENSATED
    reconcile_traced         Reconciler.settle, Settler.reconcile   span `reconcile ...`
    lookup_traced            Settler._lookup            span `reconcile lookup` (attempt 2 is
                                                        the re-check)
    compensation_traced      Settler._compensate        span `compensate {tool}`
    correction_recorded      corrections (each state)   corrections counter
    pivot_stage_traced, pivot_decision_traced           spans; pivot wait histogram
    job_traced(kind)         reconcile_run, unwind_run  span `agentsaga {kind}` in the run's trace
    run_ended                Dispatcher.end_run         irreversible_before_pivot per run

The outbound HTTP call of a connector is a child span of whichever of these is current
(httpx instrumentation, installed by `install`).
"""

from __future__ import annotations

import contextvars
import functools
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from typing import Any, Literal, TypeVar, cast

from opentelemetry import trace
from opentelemetry.trace import Link, Span, Status, StatusCode

from agentsaga.telemetry import payloads
from agentsaga.telemetry.core import context_from_carrier, current, run_context

F = TypeVar("F", bound=Callable[..., Any])

_RESULT = {"CONFIRMED": "found", "NOT_EXECUTED": "not_found", "UNKNOWN": "unknown"}
_COMP = {"INTENDED": "intended", "DONE": "sent", "FAILED": "failed", "QUEUED": "queued"}

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


def _step_attrs(step: Any) -> dict[str, Any]:
    return {"agentsaga.run_id": step.run_id, "agentsaga.step": step.step_idx,
            "agentsaga.key": step.idempotency_key, "agentsaga.tool": step.tool,
            "agentsaga.tool.class": step.tool_class}


# -- dispatch --------------------------------------------------------------------------------


def dispatch_traced(fn: F) -> F:
    @functools.wraps(fn)
    def wrapper(self: Any, run_id: str, tool: str, args: dict[str, Any]) -> Any:
        t = current()
        if t.quiet:  # no span, no attributes, no measurement: nothing would take them
            return fn(self, run_id, tool, args)
        try:
            cls = self.registry.get(tool).cls
        except Exception:  # an unknown tool: the call itself says so
            cls = ""
        attrs: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool,
            "gen_ai.tool.type": "function", "agentsaga.run_id": run_id,
            "agentsaga.tool": tool, "agentsaga.tool.class": cls}
        if t.record_payloads:
            attrs["gen_ai.tool.call.arguments"] = t.payload(args)
        started = time.perf_counter()
        outcome = "ERROR"
        try:
            with _span(f"execute_tool {tool}", attrs) as (span, _):
                out = fn(self, run_id, tool, args)
                outcome = out.outcome
                span.set_attributes({
                    "gen_ai.tool.call.id": out.key, "agentsaga.key": out.key,
                    "agentsaga.step": out.step_idx, "agentsaga.outcome": out.outcome,
                    "agentsaga.status": out.status,
                    "agentsaga.external_ref": out.external_ref or ""})
                if out.outcome in ("FAILED", "UNKNOWN"):
                    span.set_status(Status(StatusCode.ERROR, payloads.text(out.message)))
                    span.set_attribute("error.type", out.outcome)
                if t.record_payloads and out.result is not None:
                    span.set_attribute("gen_ai.tool.call.result", t.payload(out.result))
                return out
        finally:
            t.instruments.dispatch_duration.record(
                time.perf_counter() - started,
                {"agentsaga.tool": tool, "agentsaga.tool.class": cls,
                 "agentsaga.outcome": outcome})
    return cast(F, wrapper)


def irreversible_before_pivot(tool: str) -> None:
    """R10 under the `count` policy: an irreversible call runs before the pivot."""
    current().instruments.irreversible.add(1, {"agentsaga.tool": tool})
    trace.get_current_span().set_attribute("agentsaga.irreversible_before_pivot", True)


def run_ended(fn: F) -> F:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        run = fn(*args, **kwargs)
        current().instruments.run_irreversible.record(
            run.irreversible_before_pivot, {"agentsaga.run.state": run.state})
        return run
    return cast(F, wrapper)


# -- the log's writes --------------------------------------------------------------------------


def outcome_recorded(fn: F) -> F:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        step = fn(*args, **kwargs)
        if step is None:  # not moved (another writer settled it)
            return step
        ins = current().instruments
        ins.step_outcomes.add(1, {"agentsaga.tool": step.tool, "agentsaga.status": step.status})
        trace.get_current_span().add_event("agentsaga.step.status", {
            "agentsaga.step": step.step_idx, "agentsaga.key": step.idempotency_key,
            "agentsaga.status": step.status})
        phase = _phase.get()
        if phase is not None and phase["reconcile"]:
            result = _RESULT.get(step.status, step.status.lower())
            phase[result] += 1
            ins.reconcile_results.add(1, {"agentsaga.tool": step.tool,
                                          "agentsaga.reconcile.result": result})
        return step
    return cast(F, wrapper)


def compensation_recorded(fn: F) -> F:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        step = fn(*args, **kwargs)
        comp_status = str(kwargs.get("comp_status", args[4] if len(args) > 4 else ""))
        state = _COMP.get(comp_status, comp_status.lower())
        ins = current().instruments
        ins.compensations.add(1, {"agentsaga.tool": step.tool,
                                  "agentsaga.compensation.state": state})
        if kwargs.get("compensated") and step.status == "COMPENSATED":
            ins.step_outcomes.add(1, {"agentsaga.tool": step.tool,
                                      "agentsaga.status": "COMPENSATED"})
        span = trace.get_current_span()
        span.set_attribute("agentsaga.compensation.state", state)
        phase = _phase.get()
        if phase is not None:
            phase["comp:" + state] += 1
        return step
    return cast(F, wrapper)


def correction_recorded(tool: str, state: str, step_idx: int, audience: list[str]) -> None:
    """A correction changed state: queued (Proposed/Silent), Approved, Dismissed or Sent."""
    current().instruments.corrections.add(1, {
        "agentsaga.tool": tool, "agentsaga.correction.state": state})
    trace.get_current_span().add_event("agentsaga.correction", {
        "agentsaga.step": step_idx, "agentsaga.correction.state": state,
        "agentsaga.audience": audience})


# -- reconcile and compensate ------------------------------------------------------------------


def reconcile_traced(fn: F) -> F:
    """Reconciler.settle(step, ...), Reconciler.settle_many(steps, ...) or
    Settler.reconcile(run_id, ...)."""
    @functools.wraps(fn)
    def wrapper(self: Any, subject: Any, *args: Any, **kwargs: Any) -> Any:
        one = hasattr(subject, "idempotency_key")
        attrs = (_step_attrs(subject) if one else {"agentsaga.run_id": subject}
                 if isinstance(subject, str) else {"agentsaga.reconcile.keys": len(subject)})
        with _span(f"reconcile {subject.tool}" if one else "reconcile", attrs) as (span, phase):
            phase["reconcile"] = 1
            result = fn(self, subject, *args, **kwargs)
            if one:
                span.set_attributes({
                    "agentsaga.reconcile.finding": result.finding,
                    "agentsaga.reconcile.rechecked": result.finding in ("found_on_recheck",
                                                                        "not_found"),
                    "agentsaga.status": result.step.status})
            else:
                span.set_attribute("agentsaga.reconcile.rechecked", phase["lookups"] > 1)
            for key in ("found", "not_found", "unknown"):
                span.set_attribute(f"agentsaga.reconcile.{key}", phase[key])
            return result
    return cast(F, wrapper)


def lookup_traced(fn: F) -> F:
    """Settler._lookup(steps, found, failed): one batch of lookups by key."""
    @functools.wraps(fn)
    def wrapper(self: Any, steps: list[Any], found: dict[str, Any], *args: Any,
                **kwargs: Any) -> Any:
        phase = _phase.get()
        attempt = 1
        if phase is not None:
            phase["lookups"] += 1
            attempt = phase["lookups"]
        before = len(found)
        with _span("reconcile lookup", {"agentsaga.reconcile.keys": len(steps),
                                        "agentsaga.reconcile.attempt": attempt,
                                        "agentsaga.reconcile.recheck": attempt > 1}) as (span, _):
            result = fn(self, steps, found, *args, **kwargs)
            span.set_attribute("agentsaga.reconcile.found", len(found) - before)
            return result
    return cast(F, wrapper)


def compensation_traced(fn: F) -> F:
    """Settler._compensate(step, ...): the compensation call and its log writes."""
    @functools.wraps(fn)
    def wrapper(self: Any, step: Any, *args: Any, **kwargs: Any) -> Any:
        comp = step.compensation or {}
        attrs = {**_step_attrs(step), "gen_ai.operation.name": "execute_tool",
                 "gen_ai.tool.name": str(comp.get("tool", "")),
                 "agentsaga.compensation.of": step.tool}
        with _span(f"compensate {step.tool}", attrs) as (span, phase):
            result = fn(self, step, *args, **kwargs)
            if phase["comp:sent"]:
                outcome = "COMPENSATED"
            elif phase["comp:failed"]:
                outcome = "FAILED"
            else:
                outcome = "UNKNOWN"
            span.set_attribute("agentsaga.outcome", outcome)
            if outcome != "COMPENSATED":
                span.set_status(Status(StatusCode.ERROR, f"compensation {outcome.lower()}"))
            return result
    return cast(F, wrapper)


# -- pivot -------------------------------------------------------------------------------------


def pivot_stage_traced(fn: F) -> F:
    """pivot.stage(saga_log, registry, run_id, epoch, plan)."""
    @functools.wraps(fn)
    def wrapper(saga_log: Any, registry: Any, run_id: str, *args: Any, **kwargs: Any) -> Any:
        with _span("pivot stage", {"agentsaga.run_id": run_id}) as (span, _):
            record = fn(saga_log, registry, run_id, *args, **kwargs)
            span.set_attributes({
                "agentsaga.pivot.plan_hash": str(record.get("planHash", "")),
                "agentsaga.pivot.staged": len(record.get("staged", [])),
                "agentsaga.pivot.commit": len(record.get("commit", [])),
                "agentsaga.irreversible_before_pivot":
                    int(record.get("irreversibleBeforePivot", 0))})
            return record
    return cast(F, wrapper)


def pivot_decision_traced(fn: F) -> F:
    """pivot.record_decision(saga_log, run_id, plan_hash, decision, approver, reason)."""
    @functools.wraps(fn)
    def wrapper(saga_log: Any, run_id: str, *args: Any, **kwargs: Any) -> Any:
        parent, links = _parent(saga_log, run_id)
        attrs = {"agentsaga.run_id": run_id,
                 "agentsaga.pivot.plan_hash": str(kwargs.get("plan_hash_", args[0] if args
                                                             else ""))}
        with _span("pivot decision", attrs, parent=parent, links=links) as (span, _):
            record = fn(saga_log, run_id, *args, **kwargs)
            decision = str(record.get("decision", ""))
            span.set_attribute("agentsaga.pivot.decision", decision)
            waited = _seconds_between(record.get("stagedAt"), record.get("decidedAt"))
            if waited is not None:
                span.set_attribute("agentsaga.pivot.wait_s", waited)
                current().instruments.pivot_wait.record(
                    waited, {"agentsaga.pivot.decision": decision})
            return record
    return cast(F, wrapper)


def _seconds_between(start: Any, end: Any) -> float | None:
    try:
        first = datetime.fromisoformat(str(start).replace("Z", "+00:00"))
        last = datetime.fromisoformat(str(end).replace("Z", "+00:00"))
    except ValueError:
        return None
    return max(0.0, (last - first).total_seconds())


# -- jobs and the operator ---------------------------------------------------------------------


def _parent(saga_log: Any, run_id: str) -> tuple[Any, list[Link] | None]:
    """Inside a traced call (an RPC): stay in it, linked to the run. Else (a Job hours later):
    continue the run's own trace from the context stored at BeginRun."""
    stored = run_context(saga_log, run_id)
    if stored is None:
        return None, None
    run_span = trace.get_current_span(stored).get_span_context()
    if trace.get_current_span().get_span_context().is_valid:
        return None, [Link(run_span)]
    return stored, None


def job_traced(kind: Literal["reconcile", "unwind"]) -> Callable[[F], F]:
    """reconcile_run / unwind_run(saga_log, registry, run_id, ...) -> SettleReport."""
    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(saga_log: Any, registry: Any, run_id: str, *args: Any,
                    **kwargs: Any) -> Any:
            parent, links = _parent(saga_log, run_id)
            attrs = {"agentsaga.run_id": run_id, "agentsaga.job.kind": kind}
            outcome = "failed"
            try:
                with _span(f"agentsaga {kind}", attrs, parent=parent, links=links) as (span, _):
                    report = fn(saga_log, registry, run_id, *args, **kwargs)
                    outcome = "settled" if report.settled else "unsettled"
                    span.set_attribute("agentsaga.job.outcome", outcome)
                    return report
            finally:
                job_outcome(kind, outcome)
        return cast(F, wrapper)
    return decorate


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

