"""OpenTelemetry: one trace per run across agent -> sidecar -> real system -> reconcile/unwind job.

    setup(service_name)            providers and exporters from the standard OTEL_* variables
    install(Telemetry(...))        the process's telemetry (tests install in-memory providers)
    server_interceptors()          the sidecar's gRPC server reads `traceparent` from metadata
    traced_channel(channel)        the agent's SagaClient writes it
    trace_carrier()                the current context as {"traceparent": ...}: stored with the run
    run_context(log, run_id)       that stored context, for a Job that runs hours later
    run_annotations(ctx)           {"agentsaga.io/traceparent": ...} for the AgentRun
    observe_log, observe_waits     gauges read from the saga log on each collection
    zero_*_counters                counter series created at 0 (so rate/increase see the first)

The spans and metrics are recorded around typed calls (`spans`): an interceptor of the service,
the store's hooks, and context managers at the few places that reconcile, compensate, stage or
decide the pivot, so that the saga code says nothing about telemetry beyond one line at each.

Arguments and results are recorded only with AGENTSAGA_TRACE_PAYLOADS=true, and then through
`payloads.redact` (card numbers, secrets) and an optional hook (AGENTSAGA_TRACE_REDACT).
"""

from __future__ import annotations

from agentsaga.telemetry.core import (
    ANNOTATION,
    Telemetry,
    aio_client_interceptors,
    context_from_carrier,
    current,
    install,
    run_annotations,
    run_context,
    server_interceptors,
    setup,
    shutdown,
    trace_carrier,
    traced_channel,
)
from agentsaga.telemetry.gauges import observe_log, observe_waits
from agentsaga.telemetry.instruments import (
    METRICS,
    zero_operator_counters,
    zero_tool_counters,
)
from agentsaga.telemetry.payloads import redact
from agentsaga.telemetry.spans import (
    TelemetryHooks,
    TracingInterceptor,
    compensation_span,
    irreversible_before_pivot,
    job_outcome,
    job_span,
    lookup_span,
    operator_span,
    pivot_decision_span,
    pivot_stage_span,
    reconcile_span,
)

__all__ = [
    "ANNOTATION",
    "METRICS",
    "Telemetry",
    "TelemetryHooks",
    "TracingInterceptor",
    "aio_client_interceptors",
    "compensation_span",
    "context_from_carrier",
    "current",
    "install",
    "irreversible_before_pivot",
    "job_outcome",
    "job_span",
    "lookup_span",
    "observe_log",
    "observe_waits",
    "operator_span",
    "pivot_decision_span",
    "pivot_stage_span",
    "reconcile_span",
    "redact",
    "run_annotations",
    "run_context",
    "run_ended",
    "server_interceptors",
    "setup",
    "shutdown",
    "trace_carrier",
    "traced_channel",
    "zero_operator_counters",
    "zero_tool_counters",
]
