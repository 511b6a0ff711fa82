"""The Grafana dashboard shipped in the chart is the one tools/dashboard.py generates, and it
queries every metric the code declares under the name the OpenTelemetry Prometheus exporter
gives it. (What each query returns is checked against a real Prometheus in
tests/e2e/test_dashboard_prometheus.py.)"""

from __future__ import annotations

import json
import re

from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.metrics import MeterProvider
from prometheus_client import CollectorRegistry, generate_latest

from agentsaga.telemetry import METRICS
from agentsaga.telemetry.instruments import Instruments
from tools.dashboard import DASHBOARD, PANELS, render

SERIES = re.compile(r"\bagentsaga_[a-z_]+\b")
LABELS = re.compile(r"\b(by|without)\s*\([^)]*\)|\{[^}]*\}")  # grouping labels, selectors


def exported_names() -> dict[str, set[str]]:
    """Each declared metric -> the series names the Prometheus exporter renders for it."""
    registry = CollectorRegistry()
    provider = MeterProvider(metric_readers=[PrometheusMetricReader(registry=registry)])
    meter = provider.get_meter("agentsaga")
    instruments = Instruments(meter)
    for name, instrument in vars(instruments).items():
        if name == "meter":
            continue
        if hasattr(instrument, "add"):
            instrument.add(1, {"agentsaga.tool": "t"})
        else:
            instrument.record(1.0, {"agentsaga.tool": "t"})
    declared = {m.name for m in METRICS}

    def one(_: CallbackOptions) -> list[Observation]:
        return [Observation(1.0)]

    for metric in METRICS:  # the gauges are observed from the log or the operator's view
        if metric.kind == "gauge":
            meter.create_observable_gauge(metric.name, callbacks=[one], unit=metric.unit)
    text = generate_latest(registry).decode()
    provider.shutdown()
    out: dict[str, set[str]] = {name: set() for name in declared}
    for line in text.splitlines():
        if line.startswith("agentsaga_"):
            series = line.split("{")[0].split(" ")[0]
            for name in declared:
                if series.startswith(name.replace(".", "_")):
                    out[name].add(series)
    return out


def test_the_chart_carries_the_generated_dashboard() -> None:
    assert DASHBOARD.read_text() == render(), "run `python -P tools/dashboard.py`"
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] == "agentsaga"
    assert [p["title"] for p in dashboard["panels"]] == [p.title for p in PANELS]
    assert len({p.title for p in PANELS}) == len(PANELS), "two panels share a title"
    [link] = dashboard["links"]
    assert "agentsaga.run_id" in link["url"] and "${run_id}" in link["url"]


def test_every_declared_metric_is_on_the_dashboard_under_its_exported_name() -> None:
    exported = exported_names()
    queried = {s for p in PANELS for query in p.queries
               for s in SERIES.findall(LABELS.sub(" ", query.expr))}
    missing = {name for name, series in exported.items() if not series & queried}
    assert not missing, f"declared but on no panel (or under another name): {sorted(missing)}"
    every = set().union(*exported.values())
    assert queried <= every, f"queried but never exported: {sorted(queried - every)}"
