"""The Grafana dashboard shipped in the chart is valid JSON and queries only metrics that the code
emits, under the names the OpenTelemetry Prometheus exporter gives them."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from prometheus_client import CollectorRegistry, generate_latest

from agentsaga.store import SagaLog
from agentsaga.telemetry import METRICS, observe_log
from agentsaga.telemetry.instruments import Instruments

DASHBOARD = Path(__file__).resolve().parents[2] / "charts/agentsaga/dashboards/agentsaga.json"
SERIES = re.compile(r"\bagentsaga_[a-z_]+\b")
LABELS = re.compile(r"\b(by|without)\s*\([^)]*\)|\{[^}]*\}")  # grouping labels, selectors


def expressions(dashboard: dict[str, Any]) -> list[str]:
    return [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]


def exported_series(pg: str) -> set[str]:
    """Every series name the Prometheus exporter renders, one point on each instrument."""
    registry = CollectorRegistry()
    provider = MeterProvider(metric_readers=[PrometheusMetricReader(registry=registry)])
    meter = provider.get_meter("agentsaga")
    ins = Instruments(meter)
    for name, instrument in vars(ins).items():
        if name == "meter":
            continue
        if hasattr(instrument, "add"):
            instrument.add(1, {"agentsaga.tool": "t"})
        else:
            instrument.record(1.0, {"agentsaga.tool": "t"})
    saga_log = SagaLog(pg, min_size=1, max_size=1).open()
    try:
        observe_log(saga_log, meter)
        text = generate_latest(registry).decode()
    finally:
        saga_log.close()
        provider.shutdown()
    return {line.split("{")[0].split(" ")[0] for line in text.splitlines()
            if line.startswith("agentsaga_")}


def test_dashboard_is_valid_json_with_panels_and_a_trace_link() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] == "agentsaga"
    assert all(p["targets"] for p in dashboard["panels"])
    [link] = dashboard["links"]
    assert "agentsaga.run_id" in link["url"] and "${run_id}" in link["url"]


def test_every_series_the_dashboard_queries_is_emitted(pg: str) -> None:
    emitted = exported_series(pg)
    queried = {m for expr in expressions(json.loads(DASHBOARD.read_text()))
               for m in SERIES.findall(LABELS.sub(" ", expr))}
    assert queried, "the dashboard queries no agentsaga metric"
    assert queried <= emitted, f"not emitted: {sorted(queried - emitted)}"


def test_every_metric_is_on_the_dashboard(pg: str) -> None:
    text = " ".join(expressions(json.loads(DASHBOARD.read_text())))
    emitted = exported_series(pg)
    for metric in METRICS:
        base = metric.name.replace(".", "_")
        assert any(s.startswith(base) and s in text for s in emitted), metric.name
