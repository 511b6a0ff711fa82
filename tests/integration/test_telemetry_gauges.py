"""The gauges the alerts watch, read from a real saga log (telemetry.observe_log/observe_waits)
and from the operator's view of its AgentRuns (agentsaga.operator.gauges), each collected by the
OpenTelemetry SDK's reader as Prometheus would scrape it."""

from __future__ import annotations

import datetime
import json
from typing import Any

import psycopg
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, NumberDataPoint

from agentsaga.operator.gauges import RunGauges
from agentsaga.store import SagaLog
from agentsaga.telemetry import observe_log, observe_waits

Points = dict[str, list[tuple[dict[str, Any], float]]]


def collect(reader: InMemoryMetricReader) -> Points:
    data = reader.get_metrics_data()
    out: Points = {}
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                out[metric.name] = [(dict(p.attributes or {}), float(p.value))
                                    for p in metric.data.data_points
                                    if isinstance(p, NumberDataPoint)]
    return out


def meter_and_reader() -> tuple[Any, InMemoryMetricReader, MeterProvider]:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    return provider.get_meter("agentsaga"), reader, provider


def seed(dsn: str) -> None:
    """Runs in the states the gauges look for, written as the log would hold them two hours
    later (as the owner with triggers off: the plan's guard stamps stagedAt with the
    database's clock)."""
    ago = datetime.datetime.now(datetime.UTC) - datetime.timedelta(hours=2)
    staged = (ago.isoformat(timespec="seconds")).replace("+00:00", "Z")
    pivot = {"state": "AwaitingApproval", "planHash": "h1", "stagedAt": staged}
    auth = {"id": "pi_1", "status": "requires_capture", "capture_method": "manual"}
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET session_replication_role = replica")
        for run, state, piv in (("r-unknown", "running", None),
                                ("r-pivot", "awaiting_approval", json.dumps(pivot)),
                                ("r-human", "unwound", None)):
            conn.execute("INSERT INTO saga_runs (run_id, state, pivot) VALUES (%s, %s, %s)",
                         (run, state, piv))
        rows = [("r-unknown", 0, "create_ticket", "compensatable", "UNKNOWN", None, None),
                ("r-pivot", 0, "charge_card", "compensatable", "CONFIRMED", json.dumps(auth),
                 None),
                ("r-human", 0, "charge_card", "compensatable", "CONFIRMED", None, "FAILED"),
                ("r-human", 1, "send_email", "irreversible", "CONFIRMED", None, "QUEUED")]
        for run, idx, tool, cls, status, result, comp in rows:
            conn.execute(
                "INSERT INTO saga_log (run_id, step_idx, tool, tool_class, idempotency_key, args,"
                " status, result, comp_status, writer_epoch, created_at, updated_at)"
                " VALUES (%s, %s, %s, %s, %s, '{}', %s, %s, %s, 1, %s, %s)",
                (run, idx, tool, cls, f"{run}-{idx}", status, result, comp, ago, ago))
        conn.execute("INSERT INTO corrections (run_id, step_idx, tool, audience, rank, created_at)"
                     " VALUES ('r-human', 1, 'send_email', '{customer}', 9, %s)", (ago,))


def test_log_gauges_report_each_waiting_state_with_its_age(pg: str) -> None:
    seed(pg)
    meter, reader, provider = meter_and_reader()
    saga_log = SagaLog(pg, min_size=1, max_size=2).open()
    try:
        observe_log(saga_log, meter)
        observe_waits(saga_log, meter)
        points = collect(reader)
    finally:
        saga_log.close()
        provider.shutdown()

    def ages(metric: str) -> dict[tuple[str, ...], float]:
        return {tuple(str(v) for v in labels.values()): value
                for labels, value in points[metric]}

    two_hours = 7200
    assert points["agentsaga.log.up"] == [({}, 1.0)]
    assert dict((labels["agentsaga.status"], value)
                for labels, value in points["agentsaga.steps.open"]) == {"INTENDED": 0,
                                                                          "UNKNOWN": 1}
    [(key, age)] = ages("agentsaga.step.open.age").items()
    assert key == ("r-unknown", "create_ticket", "UNKNOWN") and two_hours <= age < two_hours + 60
    waits = ages("agentsaga.human.wait.age")
    assert set(waits) == {("r-human", "correction"), ("r-human", "compensation")}
    assert all(two_hours <= age < two_hours + 60 for age in waits.values())
    [(key, age)] = ages("agentsaga.pivot.awaiting.age").items()
    assert key == ("r-pivot",) and two_hours <= age < two_hours + 60
    [(key, age)] = ages("agentsaga.pivot.authorisation.age").items()
    assert key == ("r-pivot",) and two_hours <= age < two_hours + 60


def test_a_log_that_cannot_be_queried_reports_down_and_no_ages(pg: str) -> None:
    meter, reader, provider = meter_and_reader()
    saga_log = SagaLog(pg, min_size=1, max_size=1).open()
    observe_log(saga_log, meter)
    observe_waits(saga_log, meter)
    saga_log.close()  # every query now fails, as with Postgres gone
    try:
        points = collect(reader)
    finally:
        provider.shutdown()
    assert points["agentsaga.log.up"] == [({}, 0.0)]
    assert not points.get("agentsaga.steps.open") and not points.get("agentsaga.step.open.age")


def test_the_operator_reports_orphans_until_unwound_and_nothing_when_it_stops() -> None:
    now = [1000.0]
    gauges = RunGauges(monotonic=lambda: now[0], wall=lambda: now[0] + 1_700_000_000)
    meter, reader, provider = meter_and_reader()
    gauges.register(meter)
    orphaned_at = datetime.datetime.fromtimestamp(1_700_000_000 + 900, datetime.UTC)
    run: dict[str, Any] = {
        "metadata": {"name": "refund-1182", "namespace": "agents"},
        "spec": {"runId": "refund-1182", "orphanGracePeriodSeconds": 30},
        "status": {"phase": "Unwinding", "orphanedAt": orphaned_at.strftime("%Y-%m-%dT%H:%M:%SZ")}}
    gauges.started("agents", "refund-1182")
    gauges.started("agents", "other")
    gauges.resynced("agents", "refund-1182", run)
    now[0] += 40
    points = collect(reader)
    labels = {"k8s.namespace.name": "agents", "agentsaga.agentrun": "refund-1182",
              "agentsaga.run_id": "agents/refund-1182"}  # the log's id, as `--run` takes it
    assert points["agentsaga.run.orphaned.age"] == [(labels, 140.0)]
    assert points["agentsaga.run.orphan.grace"] == [(labels, 30.0)]
    assert points["agentsaga.operator.resync.age"] == [({}, 40.0)]  # "other": never resynced

    gauges.resynced("agents", "refund-1182", {**run, "status": {**run["status"],
                                                                "phase": "Unwound"}})
    gauges.stopped("agents", "other")  # deleted, or this replica was paused by its peers
    points = collect(reader)
    assert not points.get("agentsaga.run.orphaned.age")
    assert points["agentsaga.operator.resync.age"] == [({}, 0.0)]
    gauges.stopped("agents", "refund-1182")
    assert collect(reader)["agentsaga.operator.resync.age"] == [({}, 0.0)]
    provider.shutdown()
