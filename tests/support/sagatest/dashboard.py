"""The Grafana dashboard of the chart (charts/agentsaga/dashboards/agentsaga.json), as data.

A panel is one entry of PANELS: its title, kind, unit, PromQL queries and, for each query, what
the reference session of tests/e2e/test_dashboard_prometheus.py must show in it (evaluated by a
real Prometheus scraping a real sidecar and operator). Adding a panel is adding one entry here,
then `python -P tools/dashboard.py`, which writes the JSON (`--check` fails when it differs).

Names are the OpenTelemetry -> Prometheus ones: dots become underscores, counters end in
`_total`, seconds in `_seconds`; annotation units (`{step}`) add nothing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

ROOT = Path(__file__).resolve().parents[3]  # tests/support/sagatest/ -> the repository
DASHBOARD = ROOT / "charts" / "agentsaga" / "dashboards" / "agentsaga.json"

Op = str
"""==, >, >= or <."""
Check = tuple[Op, float]


@dataclass(frozen=True)
class Expect:
    """What the reference session shows: at moment `at`, for each key, the series whose label
    values include each word of the key (or every series, for "*") exist and pass the check.
    `==` is for counts: increase() may extrapolate a little above them, never below."""

    series: Mapping[str, Check]
    at: str = "end"
    """end | unknown (a step UNKNOWN) | pivot_waiting (a staged plan holds a card
    authorisation) | orphaned (an orphaned run, past its grace, being unwound)"""


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str
    expect: tuple[Expect, ...]


@dataclass(frozen=True)
class Panel:
    title: str
    kind: Literal["timeseries", "stat", "bargauge"]
    unit: str
    queries: tuple[Query, ...]
    description: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)


def q(expr: str, legend: str, *expect: Expect) -> Query:
    return Query(expr, legend, expect)


def at_end(**series: Check) -> Expect:
    return Expect(series)


ANY = "*"
PANELS: tuple[Panel, ...] = (
    Panel("Dispatch duration p95 by tool and outcome", "timeseries", "s", (
        q("histogram_quantile(0.95, sum by (le, agentsaga_tool, agentsaga_outcome) "
          "(rate(agentsaga_dispatch_duration_seconds_bucket{agentsaga_tool=~\"$tool\"}"
          "[$__rate_interval])))", "{{agentsaga_tool}} {{agentsaga_outcome}}",
          at_end(search_orders=(">", 0))),)),
    Panel("Step outcomes (CONFIRMED / FAILED / UNKNOWN / NOT_EXECUTED / COMPENSATED)",
          "timeseries", "ops", (
              q("sum by (agentsaga_status) (rate(agentsaga_step_outcomes_total"
                "{agentsaga_tool=~\"$tool\"}[$__rate_interval]))", "{{agentsaga_status}}",
                at_end(CONFIRMED=(">", 0), FAILED=(">", 0), UNKNOWN=(">", 0),
                       COMPENSATED=(">", 0), NOT_EXECUTED=("==", 0))),)),
    Panel("Open rows (outcome not known yet)", "stat", "short", (
        q("max by (agentsaga_status) (agentsaga_steps_open)", "{{agentsaga_status}}",
          Expect({"UNKNOWN": ("==", 1)}, at="unknown"),
          at_end(INTENDED=("==", 0), UNKNOWN=("==", 0))),),
          "Every process that reads the saga log reports the same counts: max, not sum."),
    Panel("Reconcile results by key", "bargauge", "short", (
        q("sum by (agentsaga_reconcile_result) (increase(agentsaga_reconcile_results_total"
          "[$__range]))", "{{agentsaga_reconcile_result}}",
          at_end(found=("==", 1), not_found=("==", 0), unknown=("==", 0))),)),
    Panel("Compensations (intended / sent / failed / queued)", "bargauge", "short", (
        q("sum by (agentsaga_compensation_state) (increase(agentsaga_compensations_total"
          "[$__range]))", "{{agentsaga_compensation_state}}",
          at_end(intended=(">", 0), sent=(">", 0), failed=("==", 0), queued=("==", 1))),)),
    Panel("Corrections by state (Proposed / Approved / Sent / Silent)", "bargauge", "short", (
        q("sum by (agentsaga_correction_state) (increase(agentsaga_corrections_total"
          "[$__range]))", "{{agentsaga_correction_state}}",
          at_end(Proposed=("==", 1), Approved=("==", 0), Sent=("==", 0))),)),
    Panel("Irreversible calls before the pivot (R10: should be 0)", "stat", "short", (
        q("sum(increase(agentsaga_irreversible_before_pivot_total[$__range]))", "calls",
          at_end(**{ANY: ("==", 0)})),
        q("sum(increase(agentsaga_run_irreversible_before_pivot_count[$__range])) - "
          "sum(increase(agentsaga_run_irreversible_before_pivot_bucket{le=\"0\"}[$__range]))",
          "ended runs with any", at_end(**{ANY: ("==", 0)})))),
    Panel("Pivot wait (staged -> human decision) p50 / p95", "timeseries", "s", (
        q("histogram_quantile(0.5, sum by (le) (rate(agentsaga_pivot_wait_seconds_bucket"
          "[$__rate_interval])))", "p50", at_end(**{ANY: (">", 0)})),
        q("histogram_quantile(0.95, sum by (le) (rate(agentsaga_pivot_wait_seconds_bucket"
          "[$__rate_interval])))", "p95", at_end(**{ANY: (">", 0)})))),
    Panel("Orphaned runs", "stat", "short", (
        q("sum(increase(agentsaga_runs_orphaned_total[$__range]))", "orphaned",
          at_end(**{ANY: ("==", 1)})),)),
    Panel("Reconcile / unwind jobs by outcome", "bargauge", "short", (
        q("sum by (agentsaga_job_kind, agentsaga_job_outcome) (increase(agentsaga_jobs_total"
          "[$__range]))", "{{agentsaga_job_kind}} {{agentsaga_job_outcome}}",
          at_end(**{"unwind started": ("==", 1), "reconcile started": ("==", 0),
                    "unwind settled": ("==", 2), "unwind failed": ("==", 0)})),),
          "Jobs the operator started, and unwinds a sidecar ran itself (the Unwind RPC). A "
          "Job's own outcome reaches Prometheus only through an OTLP collector: it ends before "
          "a scrape."),
    Panel("Oldest step without an outcome (by run and tool)", "timeseries", "s", (
        q("max by (agentsaga_run_id, agentsaga_tool) (agentsaga_step_open_age_seconds)",
          "{{agentsaga_run_id}} {{agentsaga_tool}}",
          Expect({"create_ticket": (">", 0)}, at="unknown")),),
          "Alert AgentsagaStepOutcomeUnknown: longer than the tool's certainty window."),
    Panel("Waiting for a human (oldest, by run and kind)", "timeseries", "s", (
        q("max by (agentsaga_run_id, agentsaga_wait_kind) (agentsaga_human_wait_age_seconds)",
          "{{agentsaga_run_id}} {{agentsaga_wait_kind}}", at_end(correction=(">", 0))),),
          "Alert AgentsagaWaitingForHuman."),
    Panel("Pivot awaiting approval (by run)", "timeseries", "s", (
        q("max by (agentsaga_run_id) (agentsaga_pivot_awaiting_age_seconds)",
          "{{agentsaga_run_id}}", Expect({ANY: (">=", 0)}, at="pivot_waiting")),),
          "Alert AgentsagaPivotAwaitingApproval."),
    Panel("Card authorisation held at the pivot (age by run; expires after ~7 days)",
          "timeseries", "s", (
              q("max by (agentsaga_run_id) (agentsaga_pivot_authorisation_age_seconds)",
                "{{agentsaga_run_id}}", Expect({ANY: (">", 0)}, at="pivot_waiting")),),
          "Alert AgentsagaCardAuthorisationExpiring."),
    Panel("Orphaned runs not unwound: time past the grace period", "timeseries", "s", (
        q("max by (k8s_namespace_name, agentsaga_agentrun) (agentsaga_run_orphaned_age_seconds"
          " - agentsaga_run_orphan_grace_seconds)",
          "{{k8s_namespace_name}}/{{agentsaga_agentrun}}",
          Expect({ANY: (">", 0)}, at="orphaned")),),
          "Alert AgentsagaOrphanNotUnwound: longer than the Job's deadline."),
    Panel("Saga log reachable (by process)", "stat", "short", (
        q("min by (job, instance) (agentsaga_log_up)", "{{job}} {{instance}}",
          at_end(**{ANY: ("==", 1)})),),
          "Alert AgentsagaSagaLogUnreachable."),
    Panel("Operator: longest time since an AgentRun was resynced", "stat", "s", (
        q("max(agentsaga_operator_resync_age_seconds)", "resync age",
          at_end(**{ANY: ("<", 5)})),),
          "Alert AgentsagaOperatorNotResyncing."),
)

HEADER: dict[str, Any] = {
    "title": "agentsaga",
    "uid": "agentsaga",
    "schemaVersion": 39,
    "version": 1,
    "editable": True,
    "tags": ["agentsaga", "opentelemetry"],
    "time": {"from": "now-6h", "to": "now"},
    "refresh": "30s",
    "description": "Sagas for LLM agents: dispatch outcomes, unknown steps, reconcile, "
                   "compensation, pivot, orphaned runs, what waits for a human. Metrics from the "
                   "OpenTelemetry SDK through a collector's Prometheus exporter (or the sidecar's "
                   "and the operator's scrape endpoints). Generated by tools/dashboard.py.",
    "templating": {"list": [
        {"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Metrics"},
        {"name": "traces", "type": "datasource", "query": "tempo", "label": "Traces"},
        {"name": "tool", "type": "query",
         "datasource": {"type": "prometheus", "uid": "${datasource}"},
         "query": "label_values(agentsaga_step_outcomes_total, agentsaga_tool)",
         "includeAll": True, "multi": True, "current": {"text": "All", "value": "$__all"},
         "refresh": 2},
        {"name": "run_id", "type": "textbox", "label": "Run id", "query": ""},
    ]},
    "links": [{
        "title": "Trace of run $run_id", "type": "link", "targetBlank": True,
        "url": '/explore?left={"datasource":"${traces}","queries":[{"refId":"A",'
               '"queryType":"traceql","query":"{ span.agentsaga.run_id = \\"${run_id}\\" }"}]}',
        "tooltip": "Tempo: every span of the run (TraceQL on agentsaga.run_id)",
    }],
}


def render_panel(index: int, panel: Panel) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": index + 1, "type": panel.kind, "title": panel.title,
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "gridPos": {"h": 8, "w": 12, "x": 12 * (index % 2), "y": 8 * (index // 2)},
        "fieldConfig": {"defaults": {"unit": panel.unit}, "overrides": []},
        "options": ({"legend": {"displayMode": "table", "placement": "right"}}
                    if panel.kind == "timeseries" else {}),
        "targets": [{"refId": chr(ord("A") + i), "expr": query.expr,
                     "legendFormat": query.legend} for i, query in enumerate(panel.queries)],
        **panel.extra,
    }
    if panel.description:
        out["description"] = panel.description
    return out


def render() -> str:
    dashboard = {**HEADER, "panels": [render_panel(i, p) for i, p in enumerate(PANELS)]}
    return json.dumps(dashboard, indent=2, ensure_ascii=False) + "\n"

